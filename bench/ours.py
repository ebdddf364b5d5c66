"""ultimate_jobs under the bench: the same procedure as the peers (:mod:`bench.procedure`) plus what only
ours gets — two worker processes, the 100k drain, claim cost over finished rows, idle statements and
worker memory.

Runs in the bench process with ``DJANGO_SETTINGS_MODULE=bench.settings``: enqueues go through the public
API (``handle.enqueue``, ``job_driver().enqueue_many`` over ``handle.build_request``); worker processes
are ``python -m bench.worker_proc``, which builds its worker exactly as ``manage.py jobs_worker`` does.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    LATENCY_TABLE,
    ROOT,
    WorkerProcess,
    connect,
    ensure_database,
    ensure_latency_table,
    go_all,
    latency_summary,
    paced,
    settle_latencies,
    workers,
)
from bench.plan import Plan
from bench.procedure import (
    CLIENT_SIDE_COUNT,
    WORKER_IDLE_BEFORE_PROBES_S,
    Figures,
    Subject,
    drain,
    measure_throughput,
    run_common,
    spawn,
    wait_drained,
)

DATABASE = "ultimate_jobs_bench"
NOOP = "bench_noop"
LIVE_UNCLAIMED = ("ready", "delayed", "suspended")  # x_jobs_claim_idx's predicate
PSS_METHOD = "pg_stat_statements: calls in the bench database during the window"

# The filler: finished rows in the claimed queue, written in one statement behind the driver's back (the
# bench's only such write). Every row is 'done', with a unique idempotency key.
SQL_FILLER = """
INSERT INTO x_jobs (id, run_id, name, queue, idempotency_key, input, state, attempts, max_attempts,
                    priority, run_at, created_at, updated_at, finished_at)
SELECT gen_random_uuid(), gen_random_uuid(), 'bench_filler', 'default', 'filler:' || g, '{}'::jsonb, 'done',
       1, 1, 0, now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour', now()
FROM generate_series(1, %(n)s) AS g
"""


def setup() -> None:
    """Create the bench database when missing, set Django up on it and migrate."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    ensure_database(DATABASE)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    with connect(DATABASE) as conn:
        ensure_latency_table(conn)


def driver_available() -> str | None:
    """``None`` when the postgres driver builds; else why not (the bench then reports ours as missing)."""
    from ultimate_jobs.conf import job_driver
    from ultimate_jobs.errors import UltimateError

    try:
        job_driver()
    except (UltimateError, ImportError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def version() -> str:
    """The checkout's commit, marked when the work tree has changes."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return f"{commit}{'-dirty' if git('status', '--porcelain', '--', 'ultimate_jobs') else ''}"


_seq = itertools.count()  # idempotency keys never repeat within a bench run


def reset() -> None:
    """Empty every ``x_*`` table and the latency table."""
    with connect(DATABASE) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "select tablename from pg_tables where schemaname = 'public' and tablename like 'x\\_%%'"
            ).fetchall()
        ]
        conn.execute(f"truncate {', '.join([*tables, LATENCY_TABLE])} restart identity cascade")


def enqueue_single(n: int) -> None:
    from bench.jobs import bench_noop

    for _ in range(n):
        bench_noop.enqueue({"n": next(_seq)})


def enqueue_batches(n: int, size: int) -> None:
    from bench.jobs import bench_noop
    from ultimate_jobs.conf import job_driver

    driver = job_driver()
    for start in range(0, n, size):
        driver.enqueue_many([bench_noop.build_request({"n": next(_seq)}) for _ in range(min(size, n - start))])


def enqueue_probe(kind: str) -> None:
    from bench.jobs import bench_probe

    bench_probe.enqueue({"kind": kind, "n": next(_seq), "t": time.time()})


def enqueue_probe_outbox(kind: str) -> None:
    """One probe staged through the outbox: enqueued inside ``transaction.atomic()`` (the facade installed),
    committed at once. ``t`` is taken before the block, so the figure carries the stage and the COMMIT too."""
    from django.db import transaction

    from bench.jobs import bench_probe

    t = time.time()
    with transaction.atomic():
        bench_probe.enqueue({"kind": kind, "n": next(_seq), "t": t})


def pending(conn: psycopg.Connection[Any]) -> bool:
    """Two probes, each on a partial index (x_jobs_claim_idx, x_jobs_lease_idx), so the poll costs the
    same over a million finished rows as over none."""
    row = conn.execute(
        "select exists (select 1 from x_jobs where state in ('ready', 'delayed', 'suspended') and name = %(n)s)"
        " or exists (select 1 from x_jobs where state = 'running' and name = %(n)s)",
        {"n": NOOP},
    ).fetchone()
    return bool(row and row[0])


def finished(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("select count(*) from x_jobs where name = %s and state = 'done'", (NOOP,)).fetchone()
    return int(row[0]) if row else -1


def worker_argv(concurrency: int, count: bool) -> list[str]:
    cmd = [sys.executable, "-m", "bench.worker_proc", "--concurrency", str(concurrency)]
    return [*cmd, "--count-statements"] if count else cmd


def subject() -> Subject:
    return Subject(
        name="ultimate_jobs",
        version=version(),
        database=DATABASE,
        worker_argv=worker_argv,
        install=lambda: None,  # setup() migrated
        reset=reset,
        enqueue_single=enqueue_single,
        enqueue_batches=enqueue_batches,
        enqueue_probe=enqueue_probe,
        pending=pending,
        finished=finished,
        notes="worker_from_settings(concurrency=N).run() per process (what manage.py jobs_worker runs); "
        "enqueue_many batches for the backlog",
    )


# -- measurements only ours gets -------------------------------------------------------------------


def pg_stat_statements_usable() -> bool:
    """Whether ``pg_stat_statements`` can be created AND read (it needs ``shared_preload_libraries``).
    A failed attempt is rolled back, so the extension is not left behind half-usable."""
    with connect(DATABASE) as conn:
        try:
            with conn.transaction():
                conn.execute("create extension if not exists pg_stat_statements")
                conn.execute("select count(*) from pg_stat_statements")
        except psycopg.Error:
            return False
    return True


def _server_counters(use_pss: bool) -> tuple[int, int]:
    """``(pg_stat_statements calls, xact_commit + xact_rollback)`` of the bench database, read from the
    ``postgres`` database so the read itself is not counted."""
    with connect("postgres") as conn:
        row = conn.execute(
            "select xact_commit + xact_rollback from pg_stat_database where datname = %s", (DATABASE,)
        ).fetchone()
        xacts = int(row[0]) if row else 0
        calls = 0
        if use_pss:
            row = conn.execute(
                "select coalesce(sum(calls), 0) from pg_stat_statements s "
                "join pg_database d on d.oid = s.dbid where d.datname = %s",
                (DATABASE,),
            ).fetchone()
            calls = int(row[0]) if row else 0
    return calls, xacts


def measure_idle(sub: Subject, plan: Plan, log: Path, *, use_pss: bool) -> tuple[float, float]:
    """Statements per minute of one idle worker process (pg_stat_statements when usable, else counted
    in the worker), and the bench database's transactions per minute from ``pg_stat_database``
    (approximate: backends flush those counters lazily, up to ~10 s late when idle)."""
    sub.reset()
    with workers([spawn(sub, plan, log, count=True)]) as procs:
        go_all(procs)
        time.sleep(plan.idle_warmup_s)
        client_before = procs[0].statements()
        calls_before, xacts_before = _server_counters(use_pss)
        time.sleep(plan.idle_s)
        client_after = procs[0].statements()
        calls_after, xacts_after = _server_counters(use_pss)
    scale = 60.0 / plan.idle_s
    statements = (calls_after - calls_before) if use_pss else (client_after - client_before)
    return statements * scale, (xacts_after - xacts_before) * scale


def measure_claim(sub: Subject, plan: Plan, filler: int, log: Path) -> float:
    """Throughput of ``plan.claim_n`` jobs over ``filler`` finished rows already in x_jobs (vacuumed and
    analyzed, as autovacuum would leave a long-lived table)."""
    sub.reset()
    with connect(DATABASE) as conn:
        conn.execute(SQL_FILLER, {"n": filler})
        conn.execute("vacuum analyze x_jobs")
    sub.enqueue_batches(plan.claim_n, plan.preload_batch)
    with workers([spawn(sub, plan, log)]) as procs:
        return drain(sub, procs, plan.claim_n)


def relay_argv() -> list[str]:
    return [sys.executable, "-m", "bench.relay_proc"]


def measure_outbox_latency(sub: Subject, plan: Plan, log: Path) -> dict[str, float]:
    """Pickup latency through the transactional outbox, beside the direct figure: an idle worker process
    and an idle relay process (``python -m bench.relay_proc``, what ``manage.py jobs_relay`` runs); each
    sparse probe is staged in a transaction of this process, the relay publishes it after the COMMIT
    (woken by x_outbox_wake), the worker runs it (woken by x_jobs_wake)."""
    from ultimate_jobs.outbox import install_outbox, uninstall_outbox

    sub.reset()
    install_outbox(mode="required")  # every probe must stage: one outside a transaction would raise
    try:
        procs_spec = [spawn(sub, plan, log), WorkerProcess(argv=relay_argv(), log_path=log)]
        with connect(DATABASE) as conn, workers(procs_spec) as procs:
            go_all(procs)
            time.sleep(WORKER_IDLE_BEFORE_PROBES_S)
            for _ in paced(plan.latency_sparse_n, plan.latency_sparse_interval_s):
                enqueue_probe_outbox("outbox")
            values = settle_latencies(conn, "outbox", plan.latency_sparse_n)
    finally:
        uninstall_outbox()
    return latency_summary(values)


def measure_memory(sub: Subject, plan: Plan, log: Path) -> tuple[int, int]:
    """Worker RSS (KiB) after ``plan.memory_small`` jobs, and after ``plan.memory_large`` in total."""
    sub.reset()
    sub.enqueue_batches(plan.memory_small, plan.preload_batch)
    with workers([spawn(sub, plan, log)]) as procs:
        drain(sub, procs, plan.memory_small)
        small = procs[0].rss_kb()
        t0 = time.time()
        sub.enqueue_batches(plan.memory_large - plan.memory_small, plan.preload_batch)
        wait_drained(sub, procs, plan.memory_large, t0)
        large = procs[0].rss_kb()
    return small, large


def run(plan: Plan, log: Path, progress: Any = print) -> dict[str, Any]:
    """Every figure for ultimate_jobs, ``plan.runs`` times each."""
    sub = subject()
    use_pss = pg_stat_statements_usable()
    figures = Figures()
    for i in range(plan.runs):
        progress(f"ultimate_jobs run {i + 1}/{plan.runs}: enqueue, throughput, latency")
        run_common(sub, plan, figures, idle=False, log=log)
        progress(f"ultimate_jobs run {i + 1}/{plan.runs}: pickup latency through the outbox")
        figures.keep_latency("latency_outbox", measure_outbox_latency(sub, plan, log))
        progress(f"ultimate_jobs run {i + 1}/{plan.runs}: two workers, large backlog")
        figures.keep(
            "throughput_small_2w", measure_throughput(sub, plan, plan.throughput_small_n, log, processes=2).rate
        )
        large = measure_throughput(sub, plan, plan.throughput_large_n, log)
        figures.keep("throughput_large_1w", large.rate)
        figures.keep("preload_large", large.preload_rate)
        figures.keep(
            "throughput_large_2w", measure_throughput(sub, plan, plan.throughput_large_n, log, processes=2).rate
        )
        progress(f"ultimate_jobs run {i + 1}/{plan.runs}: idle worker for {plan.idle_s:.0f}s")
        statements, xacts = measure_idle(sub, plan, log, use_pss=use_pss)
        figures.keep("idle_statements_per_min", statements)
        figures.keep("idle_xacts_per_min", xacts)
        progress(f"ultimate_jobs run {i + 1}/{plan.runs}: idle scheduler (35 tasks) for {plan.idle_s:.0f}s")
        from bench.scheduler_idle import measure_in_child

        idle_scheduler = measure_in_child(plan.idle_s, plan.idle_warmup_s, log)
        figures.keep("scheduler_idle_statements_per_min", idle_scheduler["statements_per_min"])
        progress(f"ultimate_jobs run {i + 1}/{plan.runs}: claim cost over {plan.filler_large:,} finished rows")
        small = measure_claim(sub, plan, plan.filler_small, log)
        large = measure_claim(sub, plan, plan.filler_large, log)
        figures.keep("claim_filler_small", small)
        figures.keep("claim_filler_large", large)
        figures.keep("claim_ratio", large / small)
        progress(f"ultimate_jobs run {i + 1}/{plan.runs}: worker memory")
        rss_small, rss_large = measure_memory(sub, plan, log)
        figures.keep("rss_small_kb", rss_small)
        figures.keep("rss_large_kb", rss_large)
        figures.keep("rss_ratio", rss_large / rss_small)
    sub.reset()
    return {
        "library": sub.name,
        "version": sub.version,
        "notes": sub.notes,
        "idle_method": PSS_METHOD if use_pss else CLIENT_SIDE_COUNT,
        "figures": figures.medians(),
        "runs": figures.runs,
    }
