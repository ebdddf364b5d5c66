"""The job core: a job's declaration (``definition``, ``registry``), its run (``run``, ``steps``, ``signals``,
``scope``), one attempt from claim to outcome (``execute``, ``attempt``, ``outcomes``, ``settled``), where an
enqueue goes (``routing``), and what this process runs on (``installed``: the driver, clock and event bus).
It imports no backend, role, feature or Django surface (tests/unit/test_architecture.py)."""
