"""Retention out of the box: the app's own sweep over the tables it owns, and the hourly task firing it.

``x.purge`` is a :func:`~ultimate_jobs.features.purge.purge` job over five targets, each run as its own step:

- ``x_jobs`` — finished rows past the retention of their end state (``ULTIMATE_JOBS["RETENTION"]``:
  done 7 days, failed, cancelled and dead 30 days), and their steps;
- ``x_outbox`` — published rows past the outbox retention (7 days), when the outbox is installed;
- ``x_job_events`` — events past their expiry (the bus judges that on its own clock);
- ``x_job_counters`` — counter buckets past their tier's retention (the rollup);
- ``x_job_rates`` — rate keys nobody started under for a day, and reservations a day past their instant
  (their run never came back: cancelled, removed), where the driver keeps rate schedules.

Every delete is a bounded batch (``RETENTION["BATCH"]`` rows, one short statement each), repeated until
a batch comes back short, so a purge of millions of rows never holds one long transaction.
``x.purge.hourly`` enqueues it at :data:`~ultimate_jobs.features.purge.DEFAULT_PURGE_CRON` (UTC); it needs a
worker to run it and a scheduler to fire it, like every other task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..conf import jobs_settings
from ..contracts.jobs import JobState
from ..contracts.outbox import OutboxStore
from ..core.installed import job_driver
from ..core.routing import jobs_router
from ..events import event_bus
from ..scheduler import task
from .purge import DEFAULT_PURGE_CRON, PurgeTarget, PurgeTargetLike, events_purge_target, purge

RETENTION_JOB = "x.purge"
RETENTION_TASK = "x.purge.hourly"
RATES_KEEP_MS = 86_400_000
"""How long a rate key's schedule outlives its last start, and a reservation its instant."""


def drain(delete: Callable[[int], int], batch: int) -> int:
    """Run ``delete(batch)`` until a batch comes back short; answers the rows removed in all."""
    removed = 0
    while True:
        went = delete(batch)
        removed += went
        if went < batch:
            return removed


def retention_targets() -> list[PurgeTargetLike]:
    """The app's own targets, read once per attempt from the installed driver, bus, outbox and settings."""
    retention = jobs_settings().retention
    driver = job_driver()

    def jobs(now_ms: int) -> int:
        cutoffs: dict[JobState, int] = {
            state: now_ms - keep for state, keep in retention.finished().items() if keep is not None
        }
        if not cutoffs:
            return 0
        return drain(lambda limit: driver.purge_finished(before_ms=cutoffs, limit=limit), retention.batch)

    targets: list[PurgeTargetLike] = [PurgeTarget("x_jobs", jobs)]
    store = getattr(jobs_router(), "store", None)
    if isinstance(store, OutboxStore) and retention.outbox_ms is not None:
        outbox, keep_ms = store, retention.outbox_ms

        def published(now_ms: int) -> int:
            return drain(lambda limit: outbox.purge_published(before_ms=now_ms - keep_ms, limit=limit), retention.batch)

        targets.append(PurgeTarget("x_outbox", published))
    targets.append(events_purge_target(event_bus()))
    targets.append(PurgeTarget("x_job_counters", lambda now_ms: driver.rollup_counters()))
    rates = driver.rates
    if rates is not None:
        targets.append(PurgeTarget("x_job_rates", lambda now_ms: rates.forget(before_ms=now_ms - RATES_KEEP_MS)))
    return targets


retention_sweep = purge(name=RETENTION_JOB, targets=retention_targets)


@task(cron=DEFAULT_PURGE_CRON, tz="UTC", name=RETENTION_TASK, catch_up="run-once")
def retention_hourly(occurrence_ms: int) -> list[tuple[Any, Any]]:
    """Enqueue the app's retention sweep once an hour (a live pass already queued is joined, not doubled)."""
    return [(retention_sweep, {})]
