"""The measurement procedure, one for every library: a :class:`Subject` says how to install, reset,
enqueue, spawn a worker process and read the backlog; the functions here time the same steps over it.

``bench/ours.py`` builds the ultimate_jobs subject (and adds the measurements only ours gets); each peer
script builds its own and calls :func:`peer_main`. Standard library and psycopg only: this module also
runs inside ``bench/.peers-venv``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    WorkerProcess,
    check_alive,
    connect,
    emit,
    ensure_database,
    ensure_latency_table,
    go_all,
    latency_summary,
    median_of,
    paced,
    settle_latencies,
    wait_until,
    workers,
)
from bench.plan import Plan

DRAIN_TIMEOUT_S = 1_800.0
POLL_S = 0.05  # backlog poll while draining: the resolution of every throughput figure
WORKER_IDLE_BEFORE_PROBES_S = 1.0
CLIENT_SIDE_COUNT = (
    "client-side: every statement the worker process sent through a psycopg cursor "
    "(pg_stat_statements is not loaded on this server)"
)


@dataclass(frozen=True)
class Subject:
    """One library's half of the procedure. Every enqueue callable returns once its rows are committed."""

    name: str
    version: str
    database: str
    worker_argv: Callable[[int, bool], list[str]]  # (concurrency, count_statements) -> argv
    install: Callable[[], None]
    reset: Callable[[], None]
    enqueue_single: Callable[[int], None]  # n no-op jobs, one per transaction
    enqueue_batches: Callable[[int, int], None]  # n no-op jobs in batches of `size`
    enqueue_probe: Callable[[str], None]  # one probe job carrying its kind and the wall time now
    pending: Callable[[Any], bool]  # is any no-op job not finished yet? (on the given psycopg connection)
    finished: Callable[[Any], int]  # no-op jobs finished successfully
    notes: str


def spawn(subject: Subject, plan: Plan, log: Path, *, count: bool = False) -> WorkerProcess:
    """A worker process of ``subject`` (not started)."""
    return WorkerProcess(argv=subject.worker_argv(plan.concurrency, count), log_path=log)


def measure_enqueue(subject: Subject, plan: Plan) -> tuple[float, float]:
    """Jobs per second: one enqueue per transaction, then in batches of ``plan.enqueue_batch_size``."""
    subject.reset()
    t = time.perf_counter()
    subject.enqueue_single(plan.enqueue_single_n)
    single = plan.enqueue_single_n / (time.perf_counter() - t)
    subject.reset()
    t = time.perf_counter()
    subject.enqueue_batches(plan.enqueue_batch_n, plan.enqueue_batch_size)
    batch = plan.enqueue_batch_n / (time.perf_counter() - t)
    return single, batch


def wait_drained(subject: Subject, procs: list[WorkerProcess], n: int, t0: float) -> float:
    """Wait until no no-op job is pending and ``n`` finished; answers jobs per second since ``t0``."""
    with connect(subject.database) as conn:
        alive = check_alive(procs)

        def drained() -> bool:
            alive()
            return not subject.pending(conn)

        wait_until(drained, timeout=DRAIN_TIMEOUT_S, interval=POLL_S, what=f"{subject.name} to drain {n} jobs")
        elapsed = time.time() - t0
        done = subject.finished(conn)
    if done != n:
        raise RuntimeError(f"{subject.name}: {done} of {n} jobs finished successfully")
    return n / elapsed


def drain(subject: Subject, procs: list[WorkerProcess], n: int) -> float:
    """GO every worker and wait until the backlog of ``n`` drained; answers jobs per second."""
    return wait_drained(subject, procs, n, go_all(procs))


@dataclass(frozen=True, slots=True)
class Drained:
    """A throughput measurement: the drain rate, and the rate the backlog was loaded at beforehand."""

    rate: float
    preload_rate: float


def measure_throughput(subject: Subject, plan: Plan, n: int, log: Path, *, processes: int = 1) -> Drained:
    """Jobs per second draining a backlog of ``n`` no-op jobs with ``processes`` worker processes. The
    backlog is loaded first (batches of ``plan.preload_batch``, timed too: a batch enqueue into a growing
    backlog); the clock starts when every worker is built and connected (READY)."""
    subject.reset()
    t = time.perf_counter()
    subject.enqueue_batches(n, plan.preload_batch)
    preload_rate = n / (time.perf_counter() - t)
    with workers([spawn(subject, plan, log) for _ in range(processes)]) as procs:
        return Drained(drain(subject, procs, n), preload_rate)


def measure_latency(subject: Subject, plan: Plan, log: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Pickup latency (ms, enqueue call → body start, as the body records it) against an idle worker
    process: sparse probes, then a steady stream."""
    subject.reset()
    with connect(subject.database) as conn, workers([spawn(subject, plan, log)]) as procs:
        go_all(procs)
        time.sleep(WORKER_IDLE_BEFORE_PROBES_S)
        for _ in paced(plan.latency_sparse_n, plan.latency_sparse_interval_s):
            subject.enqueue_probe("sparse")
        sparse = settle_latencies(conn, "sparse", plan.latency_sparse_n)
        for _ in paced(plan.latency_stream_n, 1.0 / plan.latency_stream_rate):
            subject.enqueue_probe("stream")
        stream = settle_latencies(conn, "stream", plan.latency_stream_n)
    return latency_summary(sparse), latency_summary(stream)


def measure_idle(subject: Subject, plan: Plan, log: Path) -> float:
    """Statements per minute an idle worker process sends (counted client-side in the worker)."""
    subject.reset()
    with workers([spawn(subject, plan, log, count=True)]) as procs:
        go_all(procs)
        time.sleep(plan.idle_warmup_s)
        before = procs[0].statements()
        time.sleep(plan.idle_s)
        after = procs[0].statements()
    return (after - before) * 60.0 / plan.idle_s


class Figures:
    """Per-run figures by key; the report shows each key's median."""

    def __init__(self) -> None:
        self.runs: dict[str, list[float]] = {}

    def keep(self, key: str, value: float) -> None:
        self.runs.setdefault(key, []).append(value)

    def keep_latency(self, prefix: str, summary: dict[str, float]) -> None:
        for stat in ("median", "p95", "max"):
            self.keep(f"{prefix}_{stat}", summary[stat])

    def medians(self) -> dict[str, float]:
        return {key: median_of(values) for key, values in self.runs.items()}


def prepare(subject: Subject) -> None:
    """The subject's database (created when missing), schema and latency table."""
    ensure_database(subject.database)
    subject.install()
    with connect(subject.database) as conn:
        ensure_latency_table(conn)


def run_common(subject: Subject, plan: Plan, figures: Figures, *, idle: bool, log: Path) -> None:
    """One run of every figure the peers share with ours."""
    single, batch = measure_enqueue(subject, plan)
    figures.keep("enqueue_single", single)
    figures.keep("enqueue_batch", batch)
    drained = measure_throughput(subject, plan, plan.throughput_small_n, log)
    figures.keep("throughput_small_1w", drained.rate)
    figures.keep("preload_small", drained.preload_rate)
    sparse, stream = measure_latency(subject, plan, log)
    figures.keep_latency("latency_sparse", sparse)
    figures.keep_latency("latency_stream", stream)
    if idle:
        figures.keep("idle_statements_per_min", measure_idle(subject, plan, log))


def run_peer(subject: Subject, plan: Plan, *, idle: bool, log: Path) -> dict[str, Any]:
    """Every peer figure, ``plan.runs`` times each."""
    prepare(subject)
    figures = Figures()
    for _ in range(plan.runs):
        run_common(subject, plan, figures, idle=idle, log=log)
    subject.reset()
    return {
        "library": subject.name,
        "version": subject.version,
        "notes": subject.notes,
        "idle_method": CLIENT_SIDE_COUNT if idle else None,
        "figures": figures.medians(),
        "runs": figures.runs,
    }


def peer_main(subject_factory: Callable[[], Subject], worker_main: Callable[[int, bool], None]) -> int:
    """A peer script's command line: ``run --plan JSON --log PATH [--idle]``, or ``worker`` (one worker
    process speaking the READY/GO/COUNT protocol of :mod:`bench.common`)."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run")
    run_cmd.add_argument("--plan", required=True, help="a bench.plan.Plan as JSON")
    run_cmd.add_argument("--idle", action="store_true", help="also measure idle statements per minute")
    run_cmd.add_argument("--log", required=True, help="the file worker processes' stderr goes to")
    work = sub.add_parser("worker")
    work.add_argument("--concurrency", type=int, default=16)
    work.add_argument("--count-statements", action="store_true")
    args = parser.parse_args()
    if args.command == "worker":
        worker_main(args.concurrency, args.count_statements)
        return 0
    emit(run_peer(subject_factory(), Plan.from_json(args.plan), idle=args.idle, log=Path(args.log)))
    return 0


def peer_worker_argv(module: str) -> Callable[[int, bool], list[str]]:
    """``worker_argv`` for a peer script run as ``python -m module`` with the current interpreter."""

    def argv(concurrency: int, count: bool) -> list[str]:
        cmd = [sys.executable, "-m", module, "worker", "--concurrency", str(concurrency)]
        return [*cmd, "--count-statements"] if count else cmd

    return argv
