"""The operator surface over queues and workers: depth, pauses, the live fleet, settle counters, and the
backfill passes in flight beside the depth."""

from __future__ import annotations

from ..conf import jobs_settings
from ..contracts.operator import MAX_JOB_PAGE
from ..contracts.protocol import JobDriver
from ..core import registry
from ..core.clock import MIN_INSTANT_MS
from ..core.definition import JobHandle
from ..core.durations import Duration, format_duration, parse_duration
from ..core.installed import job_clock
from ..errors import JobArgumentInvalidError, NotImplementedOnDriverError
from ..guards.org_boundary import refuse_fleet_view
from ._support import require_operator, resolve
from .arguments import check_name
from .backfills import BackfillRow, inspect_backfills
from .records import JobTotals, PauseState, QueueRow, StatsView, WorkerRow

DEFAULT_STATS_WINDOW = "24h"
MAX_STATS_WINDOW_MS = 3650 * 86_400_000
"""The longest stats window, ten years: counter buckets are kept 30 days, so a longer one counts the
same, and one reaching past year 1 would be no instant at all."""


def passes_in_flight(*, driver: JobDriver | None = None) -> list[BackfillRow]:
    """The backfill passes running now — ``inspect_backfills(status="running")``, at most 200, newest
    first — as ``jobs queues`` shows them beside the depth; none on a driver without a ledger.

    >>> [(p.run.name, p.run.rows_processed, p.run.last_cursor) for p in passes_in_flight()]
    """
    try:
        return inspect_backfills(status="running", limit=MAX_JOB_PAGE, driver=driver)
    except NotImplementedOnDriverError:
        return []


def declared_queues() -> set[str]:
    """The queues this process knows of: every registered job's queue and ``ULTIMATE_JOBS["QUEUES"]``."""
    queues = {h.queue for h in registry.registered("job") if isinstance(h, JobHandle)}
    return queues | set(jobs_settings().queues)


def declared_job_names() -> set[str]:
    """The names of the jobs this process declares (``@job`` and the factories over it)."""
    return {h.name for h in registry.registered("job") if isinstance(h, JobHandle)}


def inspect_queues(*, driver: JobDriver | None = None) -> list[QueueRow]:
    """Every queue with live or dead rows, a declaration or a pause: depth by live state, the dead-letter
    queue, the oldest due row, paused.

    >>> [(q.queue, q.ready, q.dead, q.paused) for q in inspect_queues()]

    Reads ``driver.stats()``, so it answers on a driver with no operator store too (pauses then come
    from the stats alone).
    """
    refuse_fleet_view("inspect_queues")
    resolved = resolve(driver)
    stats = {s.queue: s for s in resolved.stats()}
    paused = set(resolved.operator.paused_queues()) if resolved.operator is not None else set()
    paused |= {s.queue for s in stats.values() if s.paused}
    declared = declared_queues()
    rows: list[QueueRow] = []
    for queue in sorted(set(stats) | paused | declared):
        s = stats.get(queue)
        rows.append(
            QueueRow(
                queue=queue,
                ready=s.ready if s else 0,
                delayed=s.delayed if s else 0,
                running=s.running if s else 0,
                suspended=s.suspended if s else 0,
                dead=s.dead if s else 0,
                oldest_ready_ms=s.oldest_ready_ms if s else None,
                paused=queue in paused,
                declared=queue in declared,
            )
        )
    return rows


def pause_queue(queue: str, *, driver: JobDriver | None = None) -> PauseState:
    """Stop every worker claiming from ``queue`` at its next claim; enqueues still land.

    >>> pause_queue("payments")

    A blank name, a NUL byte or over 500 characters is ``X_JOB_ARGUMENT_INVALID`` (so for resume).
    """
    refuse_fleet_view("pause_queue")
    queue = check_name(queue, what="queue")
    require_operator(resolve(driver), "pause").pause_queue(queue)
    return PauseState(kind="queue", name=queue, paused=True, declared=queue in declared_queues())


def resume_queue(queue: str, *, driver: JobDriver | None = None) -> PauseState:
    """Let workers claim from ``queue`` again (resuming a queue that is not paused is a no-op).

    >>> resume_queue("payments")
    """
    refuse_fleet_view("resume_queue")
    queue = check_name(queue, what="queue")
    require_operator(resolve(driver), "resume").resume_queue(queue)
    return PauseState(kind="queue", name=queue, paused=False, declared=queue in declared_queues())


def inspect_workers(*, driver: JobDriver | None = None) -> list[WorkerRow]:
    """Every live worker (rows expire one visibility timeout after their last heartbeat).

    >>> [(w.host, w.pid, len(w.in_flight)) for w in inspect_workers()]
    """
    refuse_fleet_view("inspect_workers")
    return [
        WorkerRow(
            id=w.id,
            host=w.host,
            pid=w.pid,
            started_at_ms=w.started_at_ms,
            queues=tuple(w.queues),
            slots=w.slots,
            in_flight=tuple(w.in_flight),
            heartbeat_at_ms=w.heartbeat_at_ms,
        )
        for w in require_operator(resolve(driver), "workers").workers()
    ]


def inspect_stats(
    *, since: Duration = DEFAULT_STATS_WINDOW, since_ms: int | None = None, driver: JobDriver | None = None
) -> StatsView:
    """Settles per job — done, retried, failed, dead, run time — over the last ``since`` (a duration,
    ``"24h"`` by default), or since the instant ``since_ms``. Counter buckets are kept 30 days.

    >>> inspect_stats(since="1h").total.dead

    A window that is no duration is ``X_INVARIANT``; one over ten years (``MAX_STATS_WINDOW_MS``), or a
    ``since_ms`` that is no instant before now, ``X_JOB_ARGUMENT_INVALID``.
    """
    refuse_fleet_view("inspect_stats")
    surface = require_operator(resolve(driver), "stats")
    now = job_clock().now_ms()
    start = since_ms if since_ms is not None else now - stats_window_ms(since)
    if isinstance(start, bool) or not isinstance(start, int) or not MIN_INSTANT_MS <= start <= now:
        raise JobArgumentInvalidError(
            f"since_ms={start!r} is no instant between 0001-01-01 and now. Fix: pass a window, e.g. since='7d'",
            {"argument": "since_ms"},
        )
    totals = sorted(surface.counter_totals(start), key=lambda t: t.job)
    return StatsView(
        since_ms=start,
        until_ms=now,
        jobs=tuple(JobTotals(t.job, t.done, t.retried, t.failed, t.dead, t.duration_ms) for t in totals),
    )


def stats_window_ms(since: Duration) -> int:
    """``since`` in milliseconds, checked: ``X_INVARIANT`` for no duration, ``X_JOB_ARGUMENT_INVALID`` for
    one over :data:`MAX_STATS_WINDOW_MS` (what ``jobs stats --since`` checks before it runs)."""
    window = parse_duration(since, field="since")
    if not 0 <= window <= MAX_STATS_WINDOW_MS:
        raise JobArgumentInvalidError(
            f"since={since!r} is not a window of 0 to {format_duration(MAX_STATS_WINDOW_MS)} (counters are kept "
            "30 days). Fix: python manage.py jobs stats --since 30d",
            {"argument": "since", "max_ms": MAX_STATS_WINDOW_MS},
        )
    return window
