"""The Prometheus counters a worker moves as its attempts end: ``jobs_total{queue,outcome}`` and
``job_leases_lost_total{queue}``, on ``prometheus_client``'s default registry. The scrape side — the gauges
read at scrape time and the ``/metrics`` registry — is :mod:`ultimate_jobs.features.metrics`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
JOBS_TOTAL_OUTCOMES = ("ok", "failed", "dead")
_JOBS_TOTAL_CHILDREN: dict[tuple[str, str], Any] = {}


def count_outcome(queue: str, outcome: str | None) -> None:
    """Move ``jobs_total`` for an attempt's outcome; suspensions and drains add nothing."""
    series = _OUTCOME_SERIES.get(outcome or "")
    if series is None:
        return
    child = _JOBS_TOTAL_CHILDREN.get((queue, series))
    if child is None:  # labels() costs a lock and a lookup; once per series is enough
        child = _JOBS_TOTAL_CHILDREN[(queue, series)] = JOBS_TOTAL.labels(queue=queue, outcome=series)
    child.inc()


def prime_counters(queues: Iterable[str]) -> None:
    """Create every counter series of ``queues`` at 0, so a scrape shows them before the first increment
    and ``rate()`` sees that first increment (a series born at 1 hides it)."""
    for queue in queues:
        JOB_LEASES_LOST.labels(queue=queue)
        for outcome in JOBS_TOTAL_OUTCOMES:
            JOBS_TOTAL.labels(queue=queue, outcome=outcome)
