"""The operator's dashboard: the shape of the last hour, day or week — jobs settled per outcome and their
mean run time, bucket by bucket, for every job or one, each queue's wait from run time to start (p50, p95)
and its depth and oldest due job's age as the counter rollup sampled them — beside each queue's depth now,
and a strip of what needs attention. Read from the settle counters (``x_job_counters`` and ``x_job_waits``,
moved in the statement that settles a row, folded into wider buckets as they age) and the rollup's samples
(``x_job_queue_samples``), so its cost is the buckets of the window, never a scan of finished jobs. The
admin's dashboard page, ``GET …/dashboard`` and ``manage.py jobs stats --window 1h --json`` all print this one
read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..contracts.protocol import JobDriver
from ..contracts.series import COUNTER_VALUES, WAIT_BINS, WAIT_EDGES_MS, CounterBucket, QueueSample, WaitBucket
from ..core.installed import job_clock
from ..errors import JobArgumentInvalidError, NotImplementedOnDriverError
from ..guards.org_boundary import refuse_fleet_view
from ..models import WebhookEndpointState
from ..outbox.boot import outbox_store, outbox_supported
from ._support import require_operator, resolve
from .arguments import check_name
from .backfills import inspect_backfills
from .queues import inspect_queues, inspect_workers
from .records import QueueRow

WINDOWS: dict[str, tuple[int, int]] = {
    "1h": (3_600_000, 60_000),  # 60 one-minute buckets
    "24h": (86_400_000, 1_800_000),  # 48 half-hours
    "7d": (7 * 86_400_000, 10_800_000),  # 56 three-hour buckets
}
"""The dashboard's windows: ``name: (length, bucket width)`` in ms. Each width is a whole number of every
counter tier's width that the window reaches (1 minute, 5 minutes, 1 hour), so every counter bucket falls
in one of the window's buckets."""

STALE_BEAT_MS = 15_000
"""A worker whose last heartbeat is this old has missed one: under the default 30 s visibility timeout a worker
beats every 10 s, and the registry drops it 30 s after its last beat."""


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One bucket of the window: the settles that landed in ``[at_ms, at_ms + width)`` by outcome, and
    their summed run time."""

    at_ms: int
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0
    run_bins: tuple[int, ...] = ()  # the settles of runs per run-time bin of WAIT_EDGES_MS

    @property
    def p95_ms(self) -> int | None:
        """The 95th percentile of the bucket's run times: the upper edge of the bin holding it (``None`` when
        no run was timed)."""
        return percentile_ms(list(self.run_bins), 0.95) if any(self.run_bins) else None

    @property
    def settled(self) -> int:
        """Every settle of the bucket: completed, retried, failed and dead-lettered."""
        return self.done + self.retried + self.failed + self.dead

    @property
    def mean_ms(self) -> float | None:
        """The mean run time of the bucket's settles (``None`` when nothing settled)."""
        return self.duration_ms / self.settled if self.settled else None

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one bucket."""
        mean = self.mean_ms
        return {
            "at_ms": self.at_ms,
            "done": self.done,
            "retried": self.retried,
            "failed": self.failed,
            "dead": self.dead,
            "mean_ms": None if mean is None else round(mean, 1),
            "p95_ms": self.p95_ms,
        }


@dataclass(frozen=True, slots=True)
class WaitPoint:
    """One bucket of one queue's waits: how many attempts started in it and the 50th and 95th percentile of
    how long they waited from their row's run time — each the upper edge of the histogram bin holding it
    (``WAIT_EDGES_MS``; ``3_600_000`` means an hour or more), ``None`` when nothing started."""

    at_ms: int
    started: int = 0
    p50_ms: int | None = None
    p95_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one bucket."""
        return {"at_ms": self.at_ms, "started": self.started, "p50_ms": self.p50_ms, "p95_ms": self.p95_ms}


@dataclass(frozen=True, slots=True)
class QueueWaits:
    """One queue's waits over the window, a :class:`WaitPoint` per bucket (every one, oldest first)."""

    queue: str
    points: tuple[WaitPoint, ...]

    @property
    def worst_p95_ms(self) -> int:
        """The highest p95 of any bucket (0 when nothing started)."""
        return max((p.p95_ms or 0 for p in self.points), default=0)

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one queue's waits."""
        return {"queue": self.queue, "points": [p.as_dict() for p in self.points]}


@dataclass(frozen=True, slots=True)
class DepthPoint:
    """One bucket of one queue's depth as the rollup sampled it: the most jobs waiting (ready and delayed)
    and the oldest due job's age in ms (``None``: none was due). ``depth`` is ``None`` when nothing sampled
    the bucket (no scheduler ran then), ``0`` when it was sampled and the queue held nothing waiting."""

    at_ms: int
    depth: int | None = None
    oldest_age_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one bucket."""
        return {"at_ms": self.at_ms, "depth": self.depth, "oldest_age_ms": self.oldest_age_ms}


@dataclass(frozen=True, slots=True)
class QueueDepths:
    """One queue's sampled depth over the window, a :class:`DepthPoint` per bucket (every one, oldest first)."""

    queue: str
    points: tuple[DepthPoint, ...]

    @property
    def most(self) -> int:
        """The most jobs waiting in any bucket."""
        return max((p.depth or 0 for p in self.points), default=0)

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one queue's depth."""
        return {"queue": self.queue, "points": [p.as_dict() for p in self.points]}


@dataclass(frozen=True, slots=True)
class AttentionItem:
    """One thing an operator should look at, with how many there are (``0``: nothing to see)."""

    kind: str  # dead_letters, paused_queues, stale_workers, outbox_set_aside, failed_backfills, disabled_endpoints
    count: int
    label: str

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one item."""
        return {"kind": self.kind, "count": self.count, "label": self.label}


@dataclass(frozen=True, slots=True)
class DashboardView:
    """The window's buckets (every one, oldest first, empty ones as zeros), the queues now, and the
    attention strip. ``job`` is the one job the series is of, or ``None`` for every job."""

    window: str
    since_ms: int
    until_ms: int
    width_ms: int
    job: str | None
    points: tuple[SeriesPoint, ...]
    waits: tuple[QueueWaits, ...]
    depths: tuple[QueueDepths, ...]
    queues: tuple[QueueRow, ...]
    attention: tuple[AttentionItem, ...]

    @property
    def total(self) -> SeriesPoint:
        """The window's settles summed (``at_ms`` is the window's start)."""
        return SeriesPoint(
            self.since_ms,
            done=sum(p.done for p in self.points),
            retried=sum(p.retried for p in self.points),
            failed=sum(p.failed for p in self.points),
            dead=sum(p.dead for p in self.points),
            duration_ms=sum(p.duration_ms for p in self.points),
            run_bins=tuple(map(sum, zip(*(p.run_bins for p in self.points if p.run_bins), strict=True)))
            if any(p.run_bins for p in self.points)
            else (),
        )

    def as_dict(self) -> dict[str, Any]:
        """``{"window", "since_ms", "until_ms", "width_ms", "job", "points", "total", "waits", "depths",
        "queues", "attention"}``."""
        return {
            "window": self.window,
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
            "width_ms": self.width_ms,
            "job": self.job,
            "points": [p.as_dict() for p in self.points],
            "total": self.total.as_dict(),
            "waits": [w.as_dict() for w in self.waits],
            "depths": [d.as_dict() for d in self.depths],
            "queues": [q.as_dict() for q in self.queues],
            "attention": [a.as_dict() for a in self.attention],
        }


def check_window(window: str) -> tuple[int, int]:
    """``window``'s ``(length, bucket width)``; ``X_JOB_ARGUMENT_INVALID`` for a window not in :data:`WINDOWS`."""
    if not isinstance(window, str) or window not in WINDOWS:
        raise JobArgumentInvalidError(
            f"window={window!r} is not a dashboard window. Fix: pass one of {', '.join(WINDOWS)}",
            {"argument": "window", "allowed": list(WINDOWS)},
        )
    return WINDOWS[window]


def inspect_dashboard(window: str = "1h", *, job: str | None = None, driver: JobDriver | None = None) -> DashboardView:
    """The dashboard over the last ``window`` (``"1h"``, ``"24h"`` or ``"7d"``), of every job or of ``job``.

    >>> view = inspect_dashboard("24h")
    >>> [(p.at_ms, p.done, p.dead) for p in view.points if p.dead]
    >>> [a.label for a in view.attention if a.count]

    A window not in :data:`WINDOWS`, or a malformed job name, is ``X_JOB_ARGUMENT_INVALID``; a driver that
    keeps no counters is ``X_NOT_IMPLEMENTED``.
    """
    refuse_fleet_view("inspect_dashboard")
    length, width = check_window(window)
    if job is not None:
        check_name(job, what="job")
    chosen = resolve(driver)
    surface = require_operator(chosen, "dashboard")
    now = job_clock().now_ms()
    since = now - now % width - length + width  # whole buckets, the last one holding now
    buckets = surface.counters(job=job, since_ms=since) if job is not None else surface.counter_series(since, width)
    points = series(buckets, since_ms=since, until_ms=now, width_ms=width)
    waits = (
        ()
        if job is not None
        else wait_series(surface.wait_series(since, width), since_ms=since, until_ms=now, width_ms=width)
    )
    depths: tuple[QueueDepths, ...] = ()
    if job is None:  # depth is a queue's
        depths = depth_series(surface.queue_samples(since, width), since_ms=since, until_ms=now, width_ms=width)
    queues = tuple(inspect_queues(driver=chosen))
    attention = _attention(chosen, queues, dead=sum(p.dead for p in points), since_ms=since, now_ms=now)
    return DashboardView(window, since, now, width, job, points, waits, depths, queues, attention)


def series(buckets: list[CounterBucket], *, since_ms: int, until_ms: int, width_ms: int) -> tuple[SeriesPoint, ...]:
    """``buckets`` summed into the window's buckets of ``width_ms`` from ``since_ms`` (a multiple of it) to
    the one holding ``until_ms``: every bucket, oldest first, those nothing settled in as zeros."""
    summed = {at: [0] * COUNTER_VALUES for at in range(since_ms, until_ms + 1, width_ms)}
    for b in buckets:
        into = summed.get(b.bucket_ms - b.bucket_ms % width_ms)
        if into is not None:
            for i, value in enumerate((b.done, b.retried, b.failed, b.dead, b.duration_ms, *b.run_bins)):
                into[i] += value
    points = []
    for at, (done, retried, failed, dead, duration_ms, *bins) in summed.items():
        run_bins = tuple(bins) if any(bins) else ()
        points.append(SeriesPoint(at, done, retried, failed, dead, duration_ms, run_bins))
    return tuple(points)


def wait_series(buckets: list[WaitBucket], *, since_ms: int, until_ms: int, width_ms: int) -> tuple[QueueWaits, ...]:
    """The queues' wait histograms summed into the window's buckets of ``width_ms``, each bucket's p50 and
    p95 read off its summed bins; one :class:`QueueWaits` per queue that started anything, by name."""
    summed: dict[str, dict[int, list[int]]] = {}
    for b in buckets:
        at = b.bucket_ms - b.bucket_ms % width_ms
        if since_ms <= at <= until_ms:
            into = summed.setdefault(b.queue, {}).setdefault(at, [0] * WAIT_BINS)
            for i, count in enumerate(b.counts):
                into[i] += count
    return tuple(
        QueueWaits(
            queue,
            tuple(_wait_point(at, per_bucket.get(at)) for at in range(since_ms, until_ms + 1, width_ms)),
        )
        for queue, per_bucket in sorted(summed.items())
    )


def depth_series(samples: list[QueueSample], *, since_ms: int, until_ms: int, width_ms: int) -> tuple[QueueDepths, ...]:
    """The queues' depth samples in the window's buckets: per queue that held anything waiting, a point per
    bucket — its sample, ``0`` where the bucket was sampled without it, ``None`` where nothing sampled."""
    sampled = {s.bucket_ms for s in samples if s.queue == ""}
    per_queue: dict[str, dict[int, QueueSample]] = {}
    for s in samples:
        if s.queue:
            per_queue.setdefault(s.queue, {})[s.bucket_ms - s.bucket_ms % width_ms] = s
    buckets = range(since_ms, until_ms + 1, width_ms)
    return tuple(
        QueueDepths(
            queue,
            tuple(
                DepthPoint(at, seen[at].depth, seen[at].oldest_age_ms)
                if at in seen
                else DepthPoint(at, 0 if at in sampled else None)
                for at in buckets
            ),
        )
        for queue, seen in sorted(per_queue.items())
    )


def _wait_point(at_ms: int, bins: list[int] | None) -> WaitPoint:
    started = sum(bins or ())
    if not bins or not started:
        return WaitPoint(at_ms)
    return WaitPoint(at_ms, started, percentile_ms(bins, 0.5), percentile_ms(bins, 0.95))


def percentile_ms(bins: list[int], q: float) -> int:
    """The upper edge of the bin holding the ``q`` quantile of a histogram over :data:`WAIT_EDGES_MS` (the
    last bin, an hour or more, answers its lower edge)."""
    rank, seen = q * sum(bins), 0
    for i, count in enumerate(bins):
        seen += count
        if count and seen >= rank:
            return WAIT_EDGES_MS[min(i, len(WAIT_EDGES_MS) - 1)]
    return WAIT_EDGES_MS[-1]


def wait_text(ms: int | None) -> str:
    """A wait percentile as the chart and its table print it: the upper edge of its bin (``≤ 250 ms``), an
    hour or more as ``≥ 1 h``."""
    if ms is None:
        return "—"
    if ms >= WAIT_EDGES_MS[-1]:
        return "≥ 1 h"
    if ms < 1_000:
        return f"≤ {ms} ms"
    if ms < 60_000:
        return f"≤ {ms / 1000:g} s"
    return f"≤ {ms / 60_000:g} min"


def _attention(
    driver: JobDriver, queues: tuple[QueueRow, ...], *, dead: int, since_ms: int, now_ms: int
) -> tuple[AttentionItem, ...]:
    """The strip: dead letters in the window, paused queues, workers that stopped beating, outbox rows set
    aside, backfill passes that failed in the window, webhook endpoints disabled. A source this setup does
    not have (no outbox, no backfill ledger) is left out, not shown as zero."""
    paused = sum(q.paused for q in queues)
    stale = sum(now_ms - w.heartbeat_at_ms >= STALE_BEAT_MS for w in inspect_workers(driver=driver))
    items = [
        AttentionItem("dead_letters", dead, f"{dead} dead-lettered in the window"),
        AttentionItem("paused_queues", paused, f"{paused} queue{'s' * (paused != 1)} paused"),
        AttentionItem("stale_workers", stale, f"{stale} worker{'s' * (stale != 1)} stopped heartbeating"),
    ]
    set_aside = _outbox_set_aside()
    if set_aside is not None:
        items.append(AttentionItem("outbox_set_aside", set_aside, f"{set_aside} outbox rows set aside"))
    try:
        failed = [
            r for r in inspect_backfills(status="failed", limit=200, driver=driver) if r.run.updated_at_ms >= since_ms
        ]
    except NotImplementedOnDriverError:
        pass
    else:
        items.append(AttentionItem("failed_backfills", len(failed), f"{len(failed)} backfill passes failed"))
    disabled = _disabled_endpoints()
    items.append(AttentionItem("disabled_endpoints", disabled, f"{disabled} webhook endpoints disabled"))
    return tuple(items)


def _outbox_set_aside() -> int | None:
    """The outbox's set-aside rows, or ``None`` where the jobs database holds no outbox."""
    return outbox_store().stats().failed if outbox_supported() else None


def _disabled_endpoints() -> int:
    """Webhook endpoints the ledger (``x_webhook_endpoints``) disabled; only the app re-enables one."""
    return WebhookEndpointState.objects.filter(disabled_at__isnull=False).count()
