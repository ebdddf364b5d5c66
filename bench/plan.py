"""How big each measurement is: the full plan (the default) and ``--quick`` (a smoke run under ~3 minutes),
and the list of measurements one repetition makes.

Standard library only — the peer scripts read the same plan, passed to them as JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

CASES = (
    "drain",
    "enqueue",
    "latency",
    "idle",
    "io",
    "claim",
    "memory",
    "outbox",
    "scheduler",
    "history",
    "backfill",
    "export",
    "steps",
    "fairness",
    "rates",
    "redis",
)
EXTRAS = (
    "claim",
    "memory",
    "outbox",
    "scheduler",
    "history",
    "backfill",
    "export",
)  # ultimate_jobs only, measured in repetition 1 only


@dataclass(frozen=True, slots=True)
class Plan:
    """Every size and duration one bench run uses. ``runs`` is how many interleaved repetitions are made
    (the report shows the median with min-max)."""

    name: str
    runs: int
    cases: tuple[str, ...]
    enqueue_single_n: int  # one enqueue per call (one transaction each)
    enqueue_batch_n: int  # in batches of enqueue_batch_size
    enqueue_batch_size: int
    drain_sizes: tuple[int, ...]  # backlogs drained with `slots` slots per process
    drain_processes: tuple[int, ...]
    slots: int  # slots per worker process: the main rows
    alt_slots: int  # the second row's slots per worker process (drained at drain_sizes[0] only)
    preload_batch: int  # batch size the drain backlog is loaded with
    latency_n: int  # probes, one every latency_interval_s
    latency_interval_s: float
    latency_idle_s: float  # how long the worker idles before the first probe
    idle_s: float  # the idle window; the figure is scaled to one minute
    idle_warmup_s: float  # how long the worker idles before the window opens
    claim_n: int  # jobs drained over each filler size
    filler_small: int
    filler_large: int
    memory_small: int
    memory_large: int
    outbox_n: int  # outbox pickup probes (one every latency_interval_s)
    history_reads: int  # /metrics scrapes and jobs queues reads timed over each filler size
    backfill_rows: int  # rows of bench_rows one backfill pass sweeps
    export_rows: int  # rows of bench_rows one export writes
    io_n: int  # jobs one I/O-bound drain runs (their bodies wait IO_SLEEP_S each)
    io_in_flight: int  # how many jobs an async worker holds at once: ours --async-concurrency, the peers' knobs
    io_sync_slots: tuple[int, ...]  # ours with a sync body: the --concurrency of each row
    io_bodies: tuple[str, ...]  # "sleep" (awaits IO_SLEEP_S) and "orm" (one read, the wait, one write)
    fair_backlog: int  # the fairness case's noisy org's backlog
    fair_probes: int  # the quiet org's probes per fairness measurement (one every latency_interval_s)
    rates_n: int  # no-op jobs queued up front for each rates measurement, all on one key at RATES_PER_S
    rates_processes: int  # worker processes of each rates measurement (plan.slots slots each)

    def as_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> Plan:
        data: dict[str, Any] = json.loads(text)
        for key in ("cases", "drain_sizes", "drain_processes", "io_sync_slots", "io_bodies"):
            data[key] = tuple(data[key])
        return Plan(**data)

    def drain_configs(self) -> list[dict[str, int]]:
        """Every drain measurement of one repetition: ``{"n", "processes", "slots"}``."""
        main = [{"n": n, "processes": p, "slots": self.slots} for n in self.drain_sizes for p in self.drain_processes]
        alt = [{"n": self.drain_sizes[0], "processes": p, "slots": self.alt_slots} for p in self.drain_processes]
        return main + alt

    def io_configs(self) -> list[dict[str, str]]:
        """Every I/O-bound drain of one repetition: ``{"body", "variant"}``; the variant is ``async`` (every
        library, at ``io_in_flight``) or ``syncN`` (ours with a sync body at ``--concurrency N``)."""
        return [
            {"body": body, "variant": variant}
            for body in self.io_bodies
            for variant in [
                "async",
                *(f"sync{s}" for s in self.io_sync_slots if body != "orm" or s <= IO_ORM_SYNC_SLOTS_MAX),
            ]
        ]


RATES_DRIVERS = ("postgres", "sqlite", "redis")
"""The rates case's measurements, one per driver, each a work item of its own from a fresh database (Postgres), file
(SQLite) or Redis database: ``rates_n`` jobs under one rate limit of ``RATES_PER_S`` on one key."""

RATES_PER_S = 50
"""The rates case's limit: ``@job(rate_limit=RateLimit("bench-rates", "50/s"))`` on one key (bench/rate_jobs.py)."""


FAIRNESS_PARTS = ("off", "on", "idle", "noop_off", "noop_on")
"""The fairness case's measurements, each a work item of its own from a fresh database: the noisy neighbour with
the queue not fair (``off``) and fair (``on``), the quiet org's probes into the idle fair queue (``idle``), and a
one-org no-op drain with the queue not fair and fair (``noop_off``, ``noop_on``)."""


IO_ORM_SYNC_SLOTS_MAX = 80
"""The most thread slots the orm body's sync row runs with: each slot holds a Postgres connection of its
own, and a server at its default max_connections (100) refuses a 100-slot worker's with the bench's own."""


FULL = Plan(
    name="full",
    runs=3,
    cases=CASES,
    enqueue_single_n=2_000,
    enqueue_batch_n=20_000,
    enqueue_batch_size=100,
    drain_sizes=(10_000, 100_000),
    drain_processes=(1, 2),
    slots=10,
    alt_slots=16,
    preload_batch=1_000,
    latency_n=100,
    latency_interval_s=0.1,
    latency_idle_s=2.0,
    idle_s=60.0,
    idle_warmup_s=5.0,
    claim_n=10_000,
    filler_small=0,
    filler_large=1_000_000,
    memory_small=1_000,
    memory_large=100_000,
    outbox_n=100,
    history_reads=50,
    backfill_rows=1_000_000,
    export_rows=1_000_000,
    io_n=10_000,
    io_in_flight=500,
    io_sync_slots=(10, 100),
    io_bodies=("sleep", "orm"),
    fair_backlog=100_000,
    fair_probes=100,
    rates_n=2_000,
    rates_processes=3,
)

QUICK = replace(
    FULL,
    name="quick",
    runs=1,
    enqueue_single_n=200,
    enqueue_batch_n=2_000,
    drain_sizes=(1_000,),
    latency_n=20,
    idle_s=10.0,
    idle_warmup_s=2.0,
    claim_n=1_000,
    filler_large=50_000,
    memory_small=500,
    memory_large=2_000,
    outbox_n=10,
    history_reads=10,
    backfill_rows=50_000,
    export_rows=50_000,
    io_n=1_000,
    fair_backlog=20_000,
    fair_probes=20,
    rates_n=300,
)


def variant_kind(variant: str) -> str:
    """``async`` or ``sync`` (an io variant ``syncN`` without its slots)."""
    return variant.rstrip("0123456789")


def build_plan(*, quick: bool, runs: int | None = None, cases: tuple[str, ...] | None = None) -> Plan:
    """The plan for this invocation, with the command line's overrides applied."""
    plan = QUICK if quick else FULL
    if runs is not None:
        plan = replace(plan, runs=runs)
    if cases is not None:
        unknown = [c for c in cases if c not in CASES]
        if unknown:
            raise ValueError(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
        plan = replace(plan, cases=tuple(c for c in CASES if c in cases))
    return plan
