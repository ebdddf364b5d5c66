"""The in-memory backend, for tests and ``jobs_dev``: ``ULTIMATE_JOBS["DRIVER"] = "memory"``.

The same skeleton as the other backends — :mod:`.driver`, :mod:`.operator`, :mod:`.stores`,
:mod:`.rows` — with :mod:`.index` (the claim's heaps) and :mod:`.counters` (the counter buckets) where a
SQL backend has its statement catalogue, and the process-local outbox store (:mod:`.outbox`) and event bus
(:mod:`.events`).

>>> from ultimate_jobs.drivers.memory import MemoryDriver
>>> set_job_driver(MemoryDriver(clock=FrozenClock()))
"""

from __future__ import annotations

from .driver import MemoryDriver

__all__ = ["MemoryDriver"]
