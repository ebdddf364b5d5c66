"""A jobs module for the autodiscovery and reload tests (named by ``ULTIMATE_JOBS['MODULES']``)."""

from __future__ import annotations

from ultimate_jobs import JobRun, job


@job(idempotency_key=lambda i: f"ping:{i['n']}", tenant="none")
def fixture_ping(run: JobRun[dict]) -> int:
    """Answers its input's ``n``."""
    return int(run.input["n"])
