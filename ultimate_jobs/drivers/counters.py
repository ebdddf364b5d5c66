"""The counter series the memory and Redis operators answer, written once (the SQL drivers say the same in
``SQL_COUNTER_SERIES``): every job's buckets summed per bucket and tier width; and the wait histograms of the
stores that keep a row (or field) per bin, gathered into one :class:`WaitBucket` per queue and bucket."""

from __future__ import annotations

from collections.abc import Iterable

from ..contracts.series import COUNTER_VALUES, WAIT_BINS, CounterBucket, WaitBucket, counter_bucket


def summed_series(buckets: dict[tuple[str, int, int], list[int]], since_ms: int, width_ms: int) -> list[CounterBucket]:
    """``buckets`` (keyed ``(job, width_ms, bucket_ms)``) that end after ``since_ms``, summed over the jobs into
    buckets of ``width_ms``, oldest first (``job`` is ``""``) — what the memory and Redis operators answer."""
    summed: dict[int, list[int]] = {}
    for (_, width, start), values in buckets.items():
        if start + width > since_ms:
            into = summed.setdefault(start - start % width_ms, [0] * COUNTER_VALUES)
            for i, value in enumerate(values):
                into[i] += value
    return [counter_bucket("", start, width_ms, values) for start, values in sorted(summed.items())]


def waits_of(bins: Iterable[tuple[str, int, int, int, int]], width_ms: int) -> list[WaitBucket]:
    """``(queue, bucket_ms, width_ms, bin, count)`` rows summed into one :class:`WaitBucket` per queue and
    bucket of ``width_ms``, oldest first."""
    gathered: dict[tuple[int, int, str], list[int]] = {}
    for queue, bucket, _, index, count in bins:
        gathered.setdefault((bucket - bucket % width_ms, width_ms, queue), [0] * WAIT_BINS)[index] += count
    return [
        WaitBucket(queue, bucket, width, tuple(counts)) for (bucket, width, queue), counts in sorted(gathered.items())
    ]
