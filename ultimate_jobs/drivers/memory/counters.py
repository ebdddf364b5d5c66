"""The memory driver's ``x_job_counters``: per job, settle counts in time buckets of every tier
(:data:`~ultimate_jobs.contracts.series.COUNTER_TIERS`). The driver moves them in the settling call and folds
them (``driver.rollup_counters()``, the leader's renewal); ``driver.operator`` reads them. Callers hold the
driver's lock."""

from __future__ import annotations

from typing import Literal

from ...contracts.series import (
    COUNTER_TIERS,
    COUNTER_VALUES,
    SAMPLE_KEEP_MS,
    WAIT_BINS,
    CounterBucket,
    CounterTotals,
    QueueSample,
    WaitBucket,
    counter_bucket,
    merged_samples,
    wait_bin,
)
from ..counters import summed_series, waits_of

CounterField = Literal["done", "retried", "failed", "dead"]


class CounterBuckets:
    """The buckets, keyed ``(job, width_ms, bucket_ms)``, each ``[done, retried, failed, dead, duration_ms]``,
    and the queues' wait histograms (``x_job_waits``), keyed ``(queue, width_ms, bucket_ms)``, each a count per
    bin of :data:`~ultimate_jobs.contracts.series.WAIT_EDGES_MS`."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, int, int], list[int]] = {}
        self._waits: dict[tuple[str, int, int], list[int]] = {}  # x_job_waits: (queue, width, start) -> bins
        self._samples: dict[tuple[int, str], QueueSample] = {}  # x_job_queue_samples: (minute, queue) -> sample

    def count(self, job: str, outcome: CounterField, duration_ms: int, *, now: int, timed: bool = True) -> None:
        """Move one counter of ``job``'s 1-minute bucket containing ``now``, and with ``timed`` (a run that
        ran, not a burial) its run-time bin."""
        width = COUNTER_TIERS[0][0]
        bucket = self._buckets.setdefault((job, width, now - now % width), [0] * COUNTER_VALUES)
        bucket[("done", "retried", "failed", "dead").index(outcome)] += 1
        bucket[4] += duration_ms
        if timed:
            bucket[5 + wait_bin(duration_ms)] += 1

    def fold(self, now: int) -> int:
        """The rollup at ``now`` — SQL_ROLLUP_COUNTERS's algorithm, on the counters and the waits alike: every
        bucket past its tier's retention is taken out first, then each is added into the narrowest wider tier
        whose bucket containing it is still retained, or dropped. Answers how many counter buckets were taken
        out."""
        fold_buckets(self._waits, now)
        return fold_buckets(self._buckets, now)

    def sample(self, samples: list[QueueSample], now: int) -> None:
        """Keep the queues' depth ``samples`` (:func:`~ultimate_jobs.contracts.series.queue_samples_of`), the
        most of each per minute, and drop those older than a week."""
        for s in samples:
            seen = self._samples.get((s.bucket_ms, s.queue))
            if seen is not None:
                s = merged_samples([seen, s], COUNTER_TIERS[0][0])[0]
            self._samples[s.bucket_ms, s.queue] = s
        for key in [key for key in self._samples if key[0] < now - SAMPLE_KEEP_MS]:
            del self._samples[key]

    def samples(self, since_ms: int, width_ms: int) -> list[QueueSample]:
        """The depth samples from ``since_ms`` on, gathered into buckets of ``width_ms``."""
        return merged_samples((s for (at, _), s in self._samples.items() if at >= since_ms), width_ms)

    def count_wait(self, queue: str, wait_ms: int, *, now: int) -> None:
        """Count one attempt of ``queue`` that started ``wait_ms`` after its run time, in the 1-minute bucket
        containing ``now``."""
        width = COUNTER_TIERS[0][0]
        self._waits.setdefault((queue, width, now - now % width), [0] * WAIT_BINS)[wait_bin(wait_ms)] += 1

    def waits(self, since_ms: int, width_ms: int) -> list[WaitBucket]:
        """Every queue's wait bins in the buckets that end after ``since_ms``, summed into buckets of
        ``width_ms``, oldest first."""
        return waits_of(
            (
                (queue, start, width, index, count)
                for (queue, width, start), counts in self._waits.items()
                if start + width > since_ms
                for index, count in enumerate(counts)
                if count
            ),
            width_ms,
        )

    def of(self, job: str, since_ms: int) -> list[CounterBucket]:
        """``job``'s buckets that end after ``since_ms``, oldest first."""
        return sorted(
            (
                counter_bucket(name, start, width, values)
                for (name, width, start), values in self._buckets.items()
                if name == job and start + width > since_ms
            ),
            key=lambda b: (b.bucket_ms, b.width_ms),
        )

    def series(self, since_ms: int, width_ms: int) -> list[CounterBucket]:
        """Every job's buckets that end after ``since_ms``, summed into buckets of ``width_ms``, oldest first."""
        return summed_series(self._buckets, since_ms, width_ms)

    def totals(self, since_ms: int) -> list[CounterTotals]:
        """Per job, the sums of every bucket that ends after ``since_ms``, by job name."""
        totals: dict[str, list[int]] = {}
        for (name, width, start), values in self._buckets.items():
            if start + width > since_ms:
                into = totals.setdefault(name, [0, 0, 0, 0, 0])
                for i, value in enumerate(values[:5]):
                    into[i] += value
        return [CounterTotals(name, *values) for name, values in sorted(totals.items())]


def fold_buckets(buckets: dict[tuple[str, int, int], list[int]], now: int) -> int:
    """Fold ``buckets`` (keyed ``(name, width_ms, bucket_ms)``) at ``now`` through the counter tiers; answers
    how many were taken out."""
    keep = dict(COUNTER_TIERS)
    expired = [key for key in buckets if key[2] + key[1] <= now - keep[key[1]]]
    for name, width, start in expired:
        values = buckets.pop((name, width, start))
        for wider, wider_keep in COUNTER_TIERS:
            if wider > width and start - start % wider + wider > now - wider_keep:
                into = buckets.setdefault((name, wider, start - start % wider), [0] * len(values))
                for i, value in enumerate(values):
                    into[i] += value
                break
    return len(expired)
