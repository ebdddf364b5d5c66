"""The time series: the per-job counter buckets and their tiers, the wait histogram, queue depth samples."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .operator import QueueStats

COUNTER_TIERS: tuple[tuple[int, int], ...] = (
    (60_000, 24 * 3_600_000),  # 1-minute buckets kept 24 h
    (300_000, 7 * 86_400_000),  # 5-minute buckets kept 7 d
    (3_600_000, 30 * 86_400_000),  # 1-hour buckets kept 30 d
)
"""``(bucket width, retention)`` per tier — 1,440 + 2,016 + 720 = 4,176 rows per job name at most."""


@dataclass(frozen=True, slots=True)
class CounterBucket:
    """One counter bucket of one job: settles by outcome, the summed duration, and the settles by run time
    (``run_bins[i]``: bin ``i`` of :data:`WAIT_EDGES_MS`; empty when none was counted)."""

    job: str
    bucket_ms: int
    width_ms: int
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0
    run_bins: tuple[int, ...] = ()


WAIT_EDGES_MS: tuple[int, ...] = (
    10,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
)
"""The wait histogram's bin edges: bin ``i`` counts the waits of at least ``WAIT_EDGES_MS[i - 1]`` (0 for the
first) and under ``WAIT_EDGES_MS[i]``; the last bin, every wait of an hour or more."""

WAIT_BINS = len(WAIT_EDGES_MS) + 1

COUNTER_VALUES = 5 + WAIT_BINS
"""A counter bucket's values as the memory and Redis stores keep them: done, retried, failed, dead, the
summed duration, then the settles by run time, a count per bin of :data:`WAIT_EDGES_MS`."""


def counter_bucket(job: str, bucket_ms: int, width_ms: int, values: Sequence[int]) -> CounterBucket:
    """The :class:`CounterBucket` of ``values`` (:data:`COUNTER_VALUES` of them; ``run_bins`` empty when
    none of the run-time bins counted anything)."""
    done, retried, failed, dead, duration_ms = values[:5]
    bins = tuple(values[5:COUNTER_VALUES])
    return CounterBucket(job, bucket_ms, width_ms, done, retried, failed, dead, duration_ms, bins if any(bins) else ())


def wait_bin(wait_ms: int) -> int:
    """The histogram bin of a wait (a negative one — a clock step — counts as none)."""
    return bisect_right(WAIT_EDGES_MS, max(0, wait_ms))


SAMPLE_KEEP_MS = 7 * 86_400_000
"""How long the queues' depth samples (``x_job_queue_samples``) are kept: the dashboard's longest window."""


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One queue's depth as the counter rollup saw it in one bucket: the most rows waiting (ready and delayed)
    and the oldest due row's age in ms (``None``: none was due). The rollup samples every queue with a row
    waiting, once a minute; ``queue`` ``""`` (depth 0) marks a bucket it sampled in, so a queue missing
    there had nothing waiting."""

    queue: str
    bucket_ms: int
    depth: int
    oldest_age_ms: int | None


def queue_samples_of(stats: Sequence[QueueStats], now_ms: int) -> list[QueueSample]:
    """The rollup's sample at ``now_ms`` of the queues ``stats`` describes, in the minute holding it: the
    marker of the minute, then each queue with a row waiting."""
    minute = now_ms - now_ms % COUNTER_TIERS[0][0]
    return [QueueSample("", minute, 0, None)] + [
        QueueSample(
            s.queue,
            minute,
            s.ready + s.delayed,
            None if s.oldest_ready_ms is None else max(0, now_ms - s.oldest_ready_ms),
        )
        for s in stats
        if s.ready + s.delayed
    ]


def merged_samples(samples: Iterable[QueueSample], width_ms: int) -> list[QueueSample]:
    """``samples`` gathered per queue into buckets of ``width_ms``: the most waiting and the oldest age any
    sample of the bucket saw, by bucket and queue."""
    merged: dict[tuple[int, str], QueueSample] = {}
    for s in samples:
        key = (s.bucket_ms - s.bucket_ms % width_ms, s.queue)
        seen = merged.get(key)
        if seen is None:
            merged[key] = QueueSample(s.queue, key[0], s.depth, s.oldest_age_ms)
        else:
            ages = [a for a in (seen.oldest_age_ms, s.oldest_age_ms) if a is not None]
            merged[key] = QueueSample(s.queue, key[0], max(seen.depth, s.depth), max(ages) if ages else None)
    return [merged[key] for key in sorted(merged)]


@dataclass(frozen=True, slots=True)
class WaitBucket:
    """One queue's waits in one counter bucket: how many attempts started in it, by how long each waited
    from its row's run time (``counts[i]``: bin ``i`` of :data:`WAIT_EDGES_MS`)."""

    queue: str
    bucket_ms: int
    width_ms: int
    counts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CounterTotals:
    """A job's summed counters since an instant."""

    job: str
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0
