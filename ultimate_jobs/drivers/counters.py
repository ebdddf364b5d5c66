"""The counter series the memory and Redis operators answer, written once (the SQL drivers say the same in
``SQL_COUNTER_SERIES``): every job's buckets summed per bucket and tier width."""

from __future__ import annotations

from .records import CounterBucket


def summed_series(buckets: dict[tuple[str, int, int], list[int]], since_ms: int) -> list[CounterBucket]:
    """``buckets`` (keyed ``(job, width_ms, bucket_ms)``) that end after ``since_ms``, summed over the jobs per
    ``(bucket, width)``, oldest first (``job`` is ``""``) — what the memory and Redis operators answer."""
    summed: dict[tuple[int, int], list[int]] = {}
    for (_, width, start), values in buckets.items():
        if start + width > since_ms:
            into = summed.setdefault((start, width), [0, 0, 0, 0, 0])
            for i, value in enumerate(values):
                into[i] += value
    return [CounterBucket("", start, width, *values) for (start, width), values in sorted(summed.items())]
