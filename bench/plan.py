"""How big each measurement is: the full plan (the default) and ``--quick`` (a smoke run under ~2 minutes).

Standard library only — the peer scripts read the same plan, passed to them as JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class Plan:
    """Every size and duration one bench run uses. ``runs`` is how many times each figure is measured
    (the report shows the median)."""

    name: str
    runs: int
    enqueue_single_n: int  # one enqueue per transaction
    enqueue_batch_n: int  # in batches of enqueue_batch_size
    enqueue_batch_size: int
    throughput_small_n: int
    throughput_large_n: int
    latency_sparse_n: int  # probes, one every latency_sparse_interval_s
    latency_sparse_interval_s: float
    latency_stream_n: int  # probes at latency_stream_rate per second
    latency_stream_rate: float
    idle_s: float  # the idle window; the figure is scaled to one minute
    idle_warmup_s: float  # how long the worker idles before the window opens
    claim_n: int  # jobs drained over each filler size
    filler_small: int
    filler_large: int
    memory_small: int
    memory_large: int
    concurrency: int  # slots per worker process (ours and procrastinate)
    preload_batch: int  # enqueue_many batch used to load throughput backlogs

    def as_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> Plan:
        data: dict[str, Any] = json.loads(text)
        return Plan(**data)


FULL = Plan(
    name="full",
    runs=3,
    enqueue_single_n=2_000,
    enqueue_batch_n=20_000,
    enqueue_batch_size=100,
    throughput_small_n=10_000,
    throughput_large_n=100_000,
    latency_sparse_n=200,
    latency_sparse_interval_s=0.3,
    latency_stream_n=300,
    latency_stream_rate=10.0,
    idle_s=60.0,
    idle_warmup_s=10.0,
    claim_n=10_000,
    filler_small=10_000,
    filler_large=1_000_000,
    memory_small=1_000,
    memory_large=100_000,
    concurrency=16,
    preload_batch=1_000,
)

QUICK = Plan(
    name="quick",
    runs=1,
    enqueue_single_n=200,
    enqueue_batch_n=2_000,
    enqueue_batch_size=100,
    throughput_small_n=1_000,
    throughput_large_n=3_000,
    latency_sparse_n=15,
    latency_sparse_interval_s=0.3,
    latency_stream_n=20,
    latency_stream_rate=10.0,
    idle_s=30.0,
    idle_warmup_s=2.0,
    claim_n=1_000,
    filler_small=10_000,
    filler_large=100_000,
    memory_small=1_000,
    memory_large=5_000,
    concurrency=16,
    preload_batch=1_000,
)


def build_plan(*, quick: bool, runs: int | None = None, latency_probes: int | None = None) -> Plan:
    """The plan for this invocation, with the command line's overrides applied."""
    plan = QUICK if quick else FULL
    if runs is not None:
        plan = replace(plan, runs=runs)
    if latency_probes is not None:
        plan = replace(plan, latency_sparse_n=latency_probes)
    return plan
