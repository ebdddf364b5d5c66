"""Prometheus series the runtime moves (``prometheus_client``'s default registry)."""

from __future__ import annotations

from prometheus_client import Counter

JOB_LEASES_LOST = Counter(
    "job_leases_lost_total",
    "Jobs whose visibility lease lapsed while this worker still ran them (at-least-once turning into twice).",
    ["queue"],
)
JOBS_TOTAL = Counter("jobs_total", "Attempts that ended, by outcome: ok, failed or dead.", ["queue", "outcome"])

_OUTCOME_SERIES = {
    "completed": "ok",
    "retried": "failed",
    "dropped": "failed",
    "refused": "failed",
    "dead-lettered": "dead",
}


def count_outcome(queue: str, outcome: str | None) -> None:
    """Move ``jobs_total`` for an attempt's outcome; suspensions and drains add nothing."""
    series = _OUTCOME_SERIES.get(outcome or "")
    if series is not None:
        JOBS_TOTAL.labels(queue=queue, outcome=series).inc()
