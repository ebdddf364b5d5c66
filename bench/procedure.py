"""The measurement procedure, one for every library: a :class:`Subject` says how to install a schema,
enqueue, spawn a worker process and read the library's own tables; the functions here run one case of
one repetition over it and answer its raw figures.

``bench/ours.py`` and ``bench/bare.py`` build their subjects in the bench process; each peer script builds
its own and calls :func:`peer_main`, which the bench runs once per case and repetition (so repetitions
interleave across libraries). Standard library and psycopg only: this module also runs inside
``bench/.peers-venv``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    CountingProxy,
    CpuSampler,
    RssSampler,
    WorkerProcess,
    check_alive,
    connect,
    emit,
    fresh_database,
    io_rows_written,
    make_template,
    paced,
    percentile,
    probe_starts,
    row_updates,
    seed_io_rows,
    vacuum_analyze,
    wait_until,
    wal_position,
    workers,
)
from bench.plan import Plan, variant_kind

DRAIN_TIMEOUT_S = 3_600.0
POLL_S = 0.05  # backlog poll while draining: the resolution of the from-spawn figure
PROXY_METHOD = (
    "counting proxy: every Query and Execute message the worker process sent to the server "
    "(pg_stat_statements is not loaded on this server)"
)

Figures = dict[str, float]


@dataclass(frozen=True)
class Subject:
    """One library's half of the procedure. Every enqueue callable opens its own connection (that is
    timed) and returns once its rows are committed."""

    name: str
    version: str
    database: str
    notes: str
    cases: tuple[str, ...]  # the cases this library takes part in
    install: Callable[[], None]  # the library's schema into `database` (empty)
    worker_argv: Callable[[int], list[str]]  # slots -> argv of one worker process
    enqueue_single: Callable[[int], None]  # n no-op jobs, one per call
    enqueue_batches: Callable[[int, int], None]  # n no-op jobs in batches of `size`
    # (conn[, name]): is any job of that name (default: the no-op) not finished yet? (on the given psycopg
    # connection); how many finished successfully; their first and last completion (epoch s), library's tables
    pending: Callable[..., bool]
    finished: Callable[..., int]
    completion_span: Callable[..., tuple[float, float]]
    probe_sender: Callable[[], Any] | None = None  # opens a connection; answers send(kind, n) and close()
    worker_env: dict[str, str] = field(default_factory=dict)
    extra_enqueue: dict[str, Callable[[int], None]] = field(default_factory=dict)  # more 1-per-call rows
    io: IoSpec | None = None  # how the library runs the io case, when it takes part


@dataclass(frozen=True)
class IoSpec:
    """One library's half of the io case (I/O-bound bodies). ``body`` is ``sleep`` or ``orm``; ``variant`` is
    ``async`` (an async body at ``plan.io_in_flight`` in flight) or ``syncN`` (ours: a sync body at
    ``--concurrency N``)."""

    variants: tuple[str, ...]  # the kinds of variant this library runs: "async", "sync" (any syncN)
    name: Callable[[str, str], str]  # (body, variant) -> the job name its tables carry
    enqueue: Callable[[str, str, int, int], None]  # (body, variant, n, batch): jobs 1..n, input row i
    worker_argv: Callable[[str, str, Plan], list[str]]  # (body, variant, plan) -> argv of one worker process
    unavailable: Callable[[str], str | None] = lambda variant: None  # why a variant cannot run on this checkout
    worker_env: dict[str, str] = field(default_factory=dict)
    # (conn, name) -> attempts beyond the first over the drain's jobs, for a library that retries a failed
    # attempt on its own (ours: its default retry policy); the peers run no retries, so a failure fails the count
    reruns: Callable[[Any, str], int] | None = None


SUBJECT_FUNCTIONS = (
    "install",
    "worker_argv",
    "enqueue_single",
    "enqueue_batches",
    "pending",
    "finished",
    "completion_span",
)


def module_subject(module: Any, **fields: Any) -> Subject:
    """A :class:`Subject` whose callables are ``module``'s functions of the same names (``fields`` may
    override one, e.g. ``worker_argv``), plus the given name, version, notes, ...."""
    functions = {name: getattr(module, name) for name in SUBJECT_FUNCTIONS if name not in fields}
    return Subject(**functions, **fields)


def scalar(conn: Any, sql: str, params: Any = ()) -> Any:
    """The first column of the first row of ``sql``."""
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def time_span(conn: Any, column: str, rest: str, params: Any = ()) -> tuple[float, float]:
    """``min`` and ``max`` of the timestamp ``column`` (epoch seconds) over ``from … where …`` ``rest``."""
    row = conn.execute(
        f"select extract(epoch from min({column}))::float8, extract(epoch from max({column}))::float8 {rest}", params
    ).fetchone()
    assert row is not None
    return float(row[0]), float(row[1])


def prepare(subject: Subject) -> None:
    """The subject's template database: created anew, the schema installed, the latency table added."""
    make_template(subject.database, subject.install)


def spawn_argv(subject: Subject, slots: int, log: Path, env: dict[str, str] | None = None) -> WorkerProcess:
    return WorkerProcess(argv=subject.worker_argv(slots), env={**subject.worker_env, **(env or {})}, log_path=log)


def timed(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def timed_cpu(fn: Callable[[], None]) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds (user + system, every thread) spent in ``fn()``."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def case_enqueue(subject: Subject, plan: Plan) -> Figures:
    """Jobs per second, connection opening included — one per call, then in batches — and the client CPU each
    job cost the enqueuing process (µs per job: the library's own work plus its driver's, not the server's)."""
    out: Figures = {}
    n = plan.enqueue_single_n
    singles = {"enqueue_single": subject.enqueue_single, **subject.extra_enqueue}
    for key, fn in singles.items():
        fresh_database(subject.database)
        wall, cpu = timed_cpu(lambda fn=fn: fn(n))  # type: ignore[misc]
        out[key], out[f"{key}_cpu_us"] = n / wall, cpu * 1e6 / n
    fresh_database(subject.database)
    wall, cpu = timed_cpu(lambda: subject.enqueue_batches(plan.enqueue_batch_n, plan.enqueue_batch_size))
    out["enqueue_batch"], out["enqueue_batch_cpu_us"] = plan.enqueue_batch_n / wall, cpu * 1e6 / plan.enqueue_batch_n
    return out


def drain_key(config: dict[str, int]) -> str:
    return f"drain_{config['n']}_{config['processes']}p_{config['slots']}s"


def load_backlog(subject: Subject, plan: Plan, n: int) -> float:
    """A fresh database loaded with ``n`` no-op jobs in batches of ``plan.preload_batch``, then
    ``VACUUM ANALYZE``; answers the load rate (jobs/s)."""
    fresh_database(subject.database)
    rate = n / timed(lambda: subject.enqueue_batches(n, plan.preload_batch))
    vacuum_analyze(subject.database)
    return rate


def wait_drained(subject: Subject, procs: list[WorkerProcess], n: int, *name: str) -> float:
    """Wait until no no-op job (or job called ``name``) is pending and check that ``n`` finished; answers the
    epoch time seen."""
    with connect(subject.database) as conn:
        alive = check_alive(procs)

        def drained() -> bool:
            alive()
            return not subject.pending(conn, *name)

        wait_until(drained, timeout=DRAIN_TIMEOUT_S, interval=POLL_S, what=f"{subject.name} to drain {n} jobs")
        seen = time.time()
        done = subject.finished(conn, *name)
    if done != n:
        raise RuntimeError(f"{subject.name}: {done} of {n} jobs finished successfully")
    return seen


def case_drain(subject: Subject, plan: Plan, config: dict[str, int], log: Path) -> Figures:
    """One drain: the backlog loaded, then ``processes`` worker processes of ``slots`` slots spawned back
    to back. Two rates: from the first spawn to the bench seeing nothing pending, and the steady rate
    between the first and the last completion the library recorded. And what each job cost: the CPU of
    the worker processes (their trees) and of the PostgreSQL server per job over the middle 80% of the
    completions (sampled every 100 ms), the share of row updates Postgres made HOT (heap-only: no index
    written) over the drain, and the WAL it wrote per job from the spawn to the end."""
    n, key = config["n"], drain_key(config)
    preload = load_backlog(subject, plan, n)
    updates_before = row_updates(subject.database)
    with connect(subject.database) as conn:
        wal_before = wal_position(conn)
    with workers([spawn_argv(subject, config["slots"], log) for _ in range(config["processes"])]) as procs:
        sampler = CpuSampler([p.pid for p in procs])
        try:
            seen = wait_drained(subject, procs, n)
        finally:
            sampler.stop()
        t0 = procs[0].spawned_at
    with connect(subject.database) as conn:
        first, last = subject.completion_span(conn)
        wal = wal_position(conn) - wal_before
    updates, hot = (now - before for now, before in zip(row_updates(subject.database), updates_before, strict=True))
    margin = (last - first) * 0.1
    worker_us, server_us = sampler.per_job_between(first + margin, last - margin, (n - 1) * 0.8)
    return {
        f"{key}_spawn": n / (seen - t0),
        f"{key}_spawn_s": seen - t0,
        f"{key}_steady": (n - 1) / (last - first) if last > first else float("nan"),
        f"{key}_first_completion_s": first - t0,
        f"{key}_preload": preload,
        f"{key}_worker_cpu_us": worker_us,
        f"{key}_server_cpu_us": server_us,
        f"{key}_hot_pct": 100.0 * hot / updates if updates else float("nan"),
        f"{key}_wal_bytes": wal / n,
    }


def io_key(params: dict[str, str]) -> str:
    return f"io_{params['body']}_{params['variant']}"


def case_io(subject: Subject, plan: Plan, params: dict[str, str], log: Path) -> Figures:
    """One I/O-bound drain: ``plan.io_n`` jobs whose body waits ``IO_SLEEP_S`` (``orm``: and reads then writes
    its own row of ``bench_rows``), loaded into a fresh database (with rows 1..n) in batches of
    ``plan.preload_batch`` and vacuumed, then one worker process spawned. Figures as for a drain ('steady'
    from the library's own completion stamps, 'from spawn' from the spawn to nothing pending), and the
    worker's peak ``VmRSS`` over the middle 80% of the completions (sampled every 100 ms); for a library that
    retries on its own, how many attempts were re-runs (a figure measured through failures says so); the
    worker's and the server's CPU per job, as for a drain."""
    io = subject.io
    body, variant, key = params["body"], params["variant"], io_key(params)
    if io is None or variant_kind(variant) not in io.variants:
        raise ValueError(f"{subject.name} has no io variant {variant!r}")
    why = io.unavailable(variant)
    if why is not None:
        raise RuntimeError(why)
    name, n = io.name(body, variant), plan.io_n
    fresh_database(subject.database)
    with connect(subject.database) as conn:
        seed_io_rows(conn, n)
    io.enqueue(body, variant, n, plan.preload_batch)
    vacuum_analyze(subject.database)
    spec = WorkerProcess(
        argv=io.worker_argv(body, variant, plan), env={**subject.worker_env, **io.worker_env}, log_path=log
    )
    with workers([spec]) as procs:
        sampler, cpu = RssSampler(procs[0].pid), CpuSampler([procs[0].pid])
        try:
            seen = wait_drained(subject, procs, n, name)
        finally:
            sampler.stop()
            cpu.stop()
        t0 = procs[0].spawned_at
    with connect(subject.database) as conn:
        first, last = subject.completion_span(conn, name)
        written = io_rows_written(conn)
        reruns = io.reruns(conn, name) if io.reruns else None
    if body == "orm" and written != n:
        raise RuntimeError(f"{subject.name}: {written} of {n} rows written by the orm bodies")
    margin = (last - first) * 0.1
    worker_us, server_us = cpu.per_job_between(first + margin, last - margin, (n - 1) * 0.8)
    out = {
        f"{key}_steady": (n - 1) / (last - first) if last > first else float("nan"),
        f"{key}_spawn": n / (seen - t0),
        f"{key}_rss_kb": sampler.peak_between(first + margin, last - margin),
        f"{key}_worker_cpu_us": worker_us,
        f"{key}_server_cpu_us": server_us,
    }
    if reruns is not None:
        out[f"{key}_reruns"] = float(reruns)
    return out


def case_latency(subject: Subject, plan: Plan, log: Path, *, kind: str = "probe") -> Figures:
    """Pickup latency (ms): one idle worker process (idle ``plan.latency_idle_s`` after it is up), one
    probe every ``plan.latency_interval_s``; each probe's latency is its body's start minus the time its
    enqueue call returned (the enqueue committed by then)."""
    assert subject.probe_sender is not None
    fresh_database(subject.database)
    sender = subject.probe_sender()
    enqueued: dict[int, float] = {}
    try:
        with connect(subject.database) as conn, workers([spawn_argv(subject, plan.slots, log)]) as procs:
            procs[0].wait_ready()
            time.sleep(plan.latency_idle_s)
            for i in paced(plan.latency_n, plan.latency_interval_s):
                sender.send(kind, i)
                enqueued[i] = time.time()
            alive = check_alive(procs)

            def settled() -> bool:
                alive()
                return len(probe_starts(conn, kind)) >= plan.latency_n

            wait_until(settled, timeout=60.0, interval=0.1, what=f"{plan.latency_n} probes")
            starts = probe_starts(conn, kind)
    finally:
        sender.close()
    values = [(starts[i] - enqueued[i]) * 1000.0 for i in enqueued]
    return {
        "latency_p50": percentile(values, 0.5),
        "latency_p95": percentile(values, 0.95),
        "latency_max": max(values),
    }


def case_idle(subject: Subject, plan: Plan, log: Path) -> Figures:
    """Statements per minute of one idle worker process, counted by a proxy it connects through."""
    fresh_database(subject.database)
    proxy = CountingProxy()
    try:
        spec = spawn_argv(subject, plan.slots, log, env={"BENCH_PGPORT": str(proxy.port)})
        with workers([spec]) as procs:
            procs[0].wait_ready()
            time.sleep(plan.idle_warmup_s)
            before = proxy.statements
            time.sleep(plan.idle_s)
            check_alive(procs)()
            after = proxy.statements
    finally:
        proxy.close()
    return {"idle_statements_per_min": (after - before) * 60.0 / plan.idle_s}


def run_case(subject: Subject, case: str, params: dict[str, Any], plan: Plan, log: Path) -> Figures:
    """One case of one repetition; raw figures by key."""
    if case == "enqueue":
        return case_enqueue(subject, plan)
    if case == "drain":
        return case_drain(subject, plan, params, log)
    if case == "latency":
        return case_latency(subject, plan, log)
    if case == "idle":
        return case_idle(subject, plan, log)
    if case == "io":
        return case_io(subject, plan, params, log)
    raise ValueError(f"{subject.name} has no case {case!r}")


def peer_main(subject_factory: Callable[[], Subject], worker_main: Callable[[int, str], None]) -> int:
    """A peer script's command line: ``info`` (name, version, notes, cases, io variants), ``prepare`` (its
    template database), ``case NAME --params JSON --plan JSON --log PATH`` (one JSON line of figures), or
    ``worker --slots N [--body noop|sleep|orm]`` (one worker process; an io body runs N in flight)."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info")
    sub.add_parser("prepare")
    run_cmd = sub.add_parser("case")
    run_cmd.add_argument("name")
    run_cmd.add_argument("--params", default="{}", help="the case's parameters as JSON")
    run_cmd.add_argument("--plan", required=True, help="a bench.plan.Plan as JSON")
    run_cmd.add_argument("--log", required=True, help="the file worker processes' stderr goes to")
    work = sub.add_parser("worker")
    work.add_argument("--slots", type=int, required=True)
    work.add_argument("--body", choices=("noop", "sleep", "orm"), default="noop")
    args = parser.parse_args()
    if args.command == "worker":
        worker_main(args.slots, args.body)
        return 0
    subject = subject_factory()
    if args.command == "info":
        emit(
            {
                "library": subject.name,
                "version": subject.version,
                "notes": subject.notes,
                "cases": subject.cases,
                "io_variants": subject.io.variants if subject.io else (),
            }
        )
    elif args.command == "prepare":
        prepare(subject)
        emit({"prepared": subject.database})
    else:
        plan = Plan.from_json(args.plan)
        emit(run_case(subject, args.name, json.loads(args.params), plan, Path(args.log)))
    return 0


def peer_worker_argv(module: str) -> Callable[[int], list[str]]:
    """``worker_argv`` for a peer script run as ``python -m module`` with the current interpreter."""

    def argv(slots: int) -> list[str]:
        return [sys.executable, "-m", module, "worker", "--slots", str(slots)]

    return argv


def peer_io_argv(module: str) -> Callable[[str, str, Plan], list[str]]:
    """``IoSpec.worker_argv`` for a peer script: its worker with the io body at ``plan.io_in_flight``."""

    def argv(body: str, variant: str, plan: Plan) -> list[str]:
        return [sys.executable, "-m", module, "worker", "--slots", str(plan.io_in_flight), "--body", body]

    return argv
