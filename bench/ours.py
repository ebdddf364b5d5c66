"""ultimate_jobs under the bench: its subject for the shared procedure (:mod:`bench.procedure`) and the
figures only ours gets — claim cost over finished rows, worker memory, pickup through the outbox, the idle
scheduler, what a fair queue does for a quiet org behind a noisy one, and (in :mod:`bench.rates`) how a rate limit
holds starts to its rate on each driver.

Runs in the bench process with ``DJANGO_SETTINGS_MODULE=bench.settings`` (Django's defaults, so
``CONN_MAX_AGE`` 0): enqueues go through the public API (``handle.enqueue`` outside ``atomic()``,
``handle.enqueue_many`` for batches); a worker process is literally
``python manage.py jobs_worker --quiet --concurrency S`` under the same settings (the io case's under
``bench.settings_io``, which adds its jobs).
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    ROOT,
    WorkerProcess,
    check_alive,
    connect,
    fresh_database,
    io_rows_written,
    paced,
    percentile,
    probe_starts,
    seed_io_rows,
    vacuum_analyze,
    wait_until,
    workers,
)
from bench.plan import Plan
from bench.procedure import (
    Figures,
    IoSpec,
    Subject,
    load_backlog,
    module_subject,
    prepare,
    scalar,
    spawn_argv,
    time_span,
    wait_drained,
)

DATABASE = "ultimate_jobs_bench"
NOOP = "bench_noop"
ENV = {"DJANGO_SETTINGS_MODULE": "bench.settings"}

# The filler: finished rows in the claimed queue, written in one statement behind the driver's back (the
# bench's only such write). Every row is 'done', with a unique idempotency key.
SQL_FILLER = """
INSERT INTO x_jobs (id, run_id, name, queue, idempotency_key, input, state, attempts, max_attempts,
                    priority, run_at, created_at, updated_at, finished_at)
SELECT gen_random_uuid(), gen_random_uuid(), 'bench_filler', 'default', 'filler:' || g, '{}'::jsonb, 'done',
       1, 1, 0, now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour', now()
FROM generate_series(1, %(n)s) AS g
"""

# A week of settles, as the dashboard reads them, laid down the same over an empty and a large x_jobs: 20
# jobs' counters and 5 queues' wait bins (3 bins each) in every 1-minute bucket of the last day and every
# 5-minute bucket of the six days before it (the tiers the rollup leaves).
SQL_COUNTER_FILLER = """
WITH buckets AS (
    SELECT b, 60000 AS width FROM generate_series(
        date_trunc('minute', now()) - interval '1 day', date_trunc('minute', now()), interval '1 minute') AS b
    UNION ALL
    SELECT b, 300000 FROM generate_series(
        date_trunc('hour', now()) - interval '7 days',
        date_trunc('hour', now()) - interval '1 day' - interval '5 minutes',
        interval '5 minutes'
    ) AS b
),
counters AS (
    INSERT INTO x_job_counters (job, width_ms, bucket, done, retried, failed, dead, duration_ms)
    SELECT 'bench_job_' || j, width, b, 40, 2, 0, 1, 4000 FROM buckets, generate_series(1, 20) AS j
)
INSERT INTO x_job_waits (queue, width_ms, bucket, bin, count)
SELECT 'bench_queue_' || q, width, b, bin, 10 FROM buckets, generate_series(1, 5) AS q, generate_series(0, 2) AS bin
"""


def setup() -> None:
    """Set Django up on the bench settings (the database is created by :func:`prepare`)."""
    os.environ.update(ENV)
    import django

    django.setup()


def install() -> None:
    """The schema: ``migrate`` into the (empty) bench database."""
    from django.core.management import call_command

    close_connections()
    call_command("migrate", verbosity=0)
    close_connections()


def close_connections() -> None:
    """Drop Django's connections (the bench recreates the database under them)."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        with contextlib.suppress(Exception):
            conn.close()


def driver_available() -> str | None:
    """``None`` when the postgres driver builds; else why not (the bench then reports ours as missing)."""
    from ultimate_jobs.core.installed import job_driver
    from ultimate_jobs.errors import UltimateError

    try:
        job_driver()
    except (UltimateError, ImportError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def version() -> str:
    """The checkout's commit, marked when ultimate_jobs/ has uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return f"{commit}{'-dirty' if git('status', '--porcelain', '--', 'ultimate_jobs') else ''}"


_seq = itertools.count()  # idempotency keys never repeat within a bench run


def enqueue_single(n: int) -> None:
    from bench.jobs import bench_noop

    close_connections()  # the first enqueue opens the connection, inside the timing
    for _ in range(n):
        bench_noop.enqueue({"n": next(_seq)})


def enqueue_single_async(n: int) -> None:
    """``await bench_noop.aenqueue(input)`` from an event loop (``asyncio.run``), one per call."""
    import asyncio

    from bench.jobs import bench_noop

    close_connections()

    async def go() -> None:
        for _ in range(n):
            await bench_noop.aenqueue({"n": next(_seq)})

    asyncio.run(go())


def enqueue_single_atomic(n: int) -> None:
    """``bench_noop.enqueue(input)`` inside ``transaction.atomic()``, one job per transaction, with the outbox
    installed (mode required), as an app enqueues beside its own rows: each staged in ``x_outbox``."""
    from django.db import transaction

    from bench.jobs import bench_noop
    from ultimate_jobs.outbox import install_outbox, uninstall_outbox

    close_connections()
    install_outbox(mode="required")
    try:
        for _ in range(n):
            with transaction.atomic():
                bench_noop.enqueue({"n": next(_seq)})
    finally:
        uninstall_outbox()


def enqueue_single_atomic_direct(n: int) -> None:
    """``bench_noop.enqueue(input)`` inside ``transaction.atomic()``, one job per transaction, with no outbox:
    the insert itself joins the transaction — the same BEGIN and COMMIT round trips as a staged enqueue."""
    from django.db import transaction

    from bench.jobs import bench_noop

    close_connections()
    for _ in range(n):
        with transaction.atomic():
            bench_noop.enqueue({"n": next(_seq)})


def enqueue_batches(n: int, size: int) -> None:
    from bench.jobs import bench_noop

    close_connections()
    for start in range(0, n, size):
        bench_noop.enqueue_many([{"n": next(_seq)} for _ in range(min(size, n - start))])


class ProbeSender:
    """Direct probes: ``bench_probe.enqueue`` outside ``atomic()`` (autocommit: it returns committed)."""

    def __init__(self) -> None:
        close_connections()

    def send(self, kind: str, n: int) -> None:
        from bench.jobs import bench_probe

        bench_probe.enqueue({"kind": kind, "n": n, "seq": next(_seq)})

    def close(self) -> None:
        close_connections()


def pending(conn: psycopg.Connection[Any], name: str = NOOP) -> bool:
    """Two probes, each on a partial index (x_jobs_claim_idx, x_jobs_lease_idx), so the poll costs the
    same over a million finished rows as over none."""
    return bool(
        scalar(
            conn,
            "select exists (select 1 from x_jobs where state in ('ready', 'delayed', 'suspended') and name = %(n)s)"
            " or exists (select 1 from x_jobs where state = 'running' and name = %(n)s)",
            {"n": name},
        )
    )


def finished(conn: psycopg.Connection[Any], name: str = NOOP) -> int:
    return int(scalar(conn, "select count(*) from x_jobs where name = %s and state = 'done'", (name,)))


def completion_span(conn: psycopg.Connection[Any], name: str = NOOP) -> tuple[float, float]:
    return time_span(conn, "finished_at", "from x_jobs where name = %s and state = 'done'", (name,))


def worker_argv(slots: int) -> list[str]:
    # --quiet: the bench times the queue, not a console line per job
    return [sys.executable, "manage.py", "jobs_worker", "--quiet", "--concurrency", str(slots)]


# -- the io case: I/O-bound bodies (bench/io_jobs.py), each form on a queue its worker alone serves --------

IO_ENV = {"DJANGO_SETTINGS_MODULE": "bench.settings_io"}
IO_ASYNC_QUEUE = "bench_io"  # bench/io_jobs.py's queues (not imported here: see bench/io_enqueue.py)
IO_SYNC_QUEUE = "bench_io_sync"


def io_name(body: str, variant: str) -> str:
    return f"bench_io_{body}_{'async' if variant == 'async' else 'sync'}"


def io_enqueue(body: str, variant: str, n: int, size: int) -> None:
    """Jobs for rows ``1..n`` of ``bench_rows``, loaded by ``python -m bench.io_enqueue`` (``enqueue_many``,
    ``size`` at a time) under ``bench.settings_io``; ``RuntimeError`` with its reason when it cannot."""
    argv = [sys.executable, "-m", "bench.io_enqueue", body, variant, str(n), str(size)]
    done = subprocess.run(argv, cwd=ROOT, env={**os.environ, **IO_ENV}, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"ours {body} {variant}: {tail}")


def io_reruns(conn: psycopg.Connection[Any], name: str) -> int:
    """Attempts beyond the first over the drain's jobs (each failed attempt the default retry policy re-ran)."""
    return int(scalar(conn, "select coalesce(sum(attempts - 1), 0) from x_jobs where name = %s", (name,)))


def io_worker_argv(body: str, variant: str, plan: Plan) -> list[str]:
    """``async``: the async bodies' queue at ``--async-concurrency QUEUE=plan.io_in_flight``; ``syncN``: the
    sync bodies' queue at ``--concurrency N``."""
    head = [sys.executable, "manage.py", "jobs_worker", "--quiet"]
    if variant == "async":
        return [*head, "--queues", IO_ASYNC_QUEUE, "--async-concurrency", f"{IO_ASYNC_QUEUE}={plan.io_in_flight}"]
    return [*head, "--queues", IO_SYNC_QUEUE, "--concurrency", variant.removeprefix("sync")]


def io_unavailable(variant: str) -> str | None:
    """Why ours cannot run an io variant on this checkout (async: ``jobs_worker`` has no
    ``--async-concurrency``); None when it can. A body ``@job`` refuses shows when its jobs are enqueued."""
    if variant != "async":
        return None
    from ultimate_jobs.management.commands.jobs_worker import Command

    flags = Command().create_parser("manage.py", "jobs_worker")._option_string_actions
    if "--async-concurrency" not in flags:
        return "ours with an async def body: this checkout's jobs_worker has no --async-concurrency"
    return None


def io_event_loop() -> str:
    """Which loop ours' async bodies run on in this checkout's venv (``EVENT_LOOP`` left at "auto")."""
    if importlib.util.find_spec("uvloop") is None:
        return "asyncio's event loop: uvloop is not installed"
    return "on uvloop: installed (the uvloop extra), EVENT_LOOP left at 'auto'"


def subject() -> Subject:
    return module_subject(
        sys.modules[__name__],
        name="ultimate_jobs",
        version=version(),
        database=DATABASE,
        notes="python manage.py jobs_worker --quiet --concurrency S under Django's default settings (CONN_MAX_AGE 0); "
        "enqueue handle.enqueue outside atomic() (async: await handle.aenqueue under asyncio.run; atomic: "
        "handle.enqueue in atomic() with the outbox installed, mode required), batches handle.enqueue_many; "
        "io case (M in flight): "
        "async def bodies at jobs_worker --queues bench_io --async-concurrency bench_io=M "
        f"({io_event_loop()}), sync bodies (time.sleep) "
        "at --queues bench_io_sync --concurrency N, both under bench.settings_io; orm body: await "
        "BenchRow.objects.aget(pk=i) + await BenchRow.objects.filter(pk=i).aupdate(value=...) (sync: get + "
        "filter().update())",
        cases=(
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
        ),
        probe_sender=ProbeSender,
        worker_env=ENV,
        extra_enqueue={
            "enqueue_single_async": enqueue_single_async,
            "enqueue_single_atomic": enqueue_single_atomic,
            "enqueue_single_atomic_direct": enqueue_single_atomic_direct,
        },
        io=IoSpec(
            variants=("async", "sync"),
            name=io_name,
            enqueue=io_enqueue,
            worker_argv=io_worker_argv,
            unavailable=io_unavailable,
            worker_env=IO_ENV,
            reruns=io_reruns,
        ),
    )


def prepare_ours(sub: Subject) -> None:
    close_connections()
    prepare(sub)


# -- measurements only ours gets -------------------------------------------------------------------


def steady_drain(sub: Subject, plan: Plan, n: int, log: Path) -> float:
    """Drain the ``n`` no-op jobs already queued with one worker process; the steady rate (jobs/s)."""
    with workers([spawn_argv(sub, plan.slots, log)]) as procs:
        wait_drained(sub, procs, n)
    with connect(DATABASE) as conn:
        first, last = completion_span(conn)
    return (n - 1) / (last - first)


def case_claim(sub: Subject, plan: Plan, log: Path) -> Figures:
    """Steady drain rate of ``plan.claim_n`` jobs over an empty x_jobs, then over ``plan.filler_large``
    finished rows (vacuumed and analyzed, as autovacuum would leave a long-lived table)."""
    out: Figures = {}
    for label, filler in (("small", plan.filler_small), ("large", plan.filler_large)):
        fresh_database(DATABASE)
        if filler:
            with connect(DATABASE) as conn:
                conn.execute(SQL_FILLER, {"n": filler})
        enqueue_batches(plan.claim_n, plan.preload_batch)
        vacuum_analyze(DATABASE)
        out[f"claim_filler_{label}"] = steady_drain(sub, plan, plan.claim_n, log)
    out["claim_ratio"] = out["claim_filler_large"] / out["claim_filler_small"]
    return out


def case_memory(sub: Subject, plan: Plan, log: Path) -> Figures:
    """Worker RSS (KiB) after ``plan.memory_small`` jobs, and after ``plan.memory_large`` in total."""
    load_backlog(sub, plan, plan.memory_small)
    with workers([spawn_argv(sub, plan.slots, log)]) as procs:
        wait_drained(sub, procs, plan.memory_small)
        small = procs[0].rss_kb()
        enqueue_batches(plan.memory_large - plan.memory_small, plan.preload_batch)
        wait_drained(sub, procs, plan.memory_large)
        large = procs[0].rss_kb()
    return {"rss_small_kb": small, "rss_large_kb": large, "rss_ratio": large / small}


def case_outbox(sub: Subject, plan: Plan, log: Path) -> Figures:
    """Pickup latency through the transactional outbox: an idle worker process and an idle relay process
    (``python manage.py jobs_relay``); each probe is staged in ``transaction.atomic()`` with the outbox
    router installed (mode required), and its latency runs from the block's COMMIT to the body's start."""
    from django.db import transaction

    from bench.jobs import bench_probe
    from ultimate_jobs.outbox import install_outbox, uninstall_outbox

    fresh_database(DATABASE)
    close_connections()
    relay = WorkerProcess(argv=[sys.executable, "manage.py", "jobs_relay", "--quiet"], env=ENV, log_path=log)
    enqueued: dict[int, float] = {}
    install_outbox(mode="required")
    try:
        with connect(DATABASE) as conn, workers([spawn_argv(sub, plan.slots, log), relay]) as procs:
            for proc in procs:
                proc.wait_ready()
            time.sleep(plan.latency_idle_s)
            for i in paced(plan.outbox_n, plan.latency_interval_s):
                with transaction.atomic():
                    bench_probe.enqueue({"kind": "outbox", "n": i, "seq": next(_seq)})
                enqueued[i] = time.time()
            alive = check_alive(procs)

            def settled() -> bool:
                alive()
                return len(probe_starts(conn, "outbox")) >= plan.outbox_n

            wait_until(settled, timeout=60.0, interval=0.1, what=f"{plan.outbox_n} outbox probes")
            starts = probe_starts(conn, "outbox")
    finally:
        uninstall_outbox()
        close_connections()
    values = [(starts[i] - enqueued[i]) * 1000.0 for i in enqueued]
    return {"outbox_p50": percentile(values, 0.5), "outbox_p95": percentile(values, 0.95), "outbox_max": max(values)}


def case_history(plan: Plan) -> Figures:
    """What a long history costs the operator's reads: one ``/metrics`` scrape (the registry the view
    renders: the queue gauges, the outbox gauges, the process counters), one ``jobs queues`` read
    (``operator.inspect_queues``) and one read of the dashboard over its longest window
    (``operator.inspect_dashboard("7d")``, over a week of counters and waits laid down the same both times:
    SQL_COUNTER_FILLER), and the admin's job list sorted by attempts with its count (``list_jobs(order=
    "-attempts", limit=50)`` then ``count_jobs()``, what the page reads), each the median of
    ``plan.history_reads`` calls, over an empty x_jobs and then over ``plan.filler_large`` finished rows
    (vacuumed and analyzed, as autovacuum leaves them)."""
    from prometheus_client import generate_latest

    from ultimate_jobs import operator
    from ultimate_jobs.features.metrics import metrics_registry

    def median_ms(call: Any) -> float:
        samples = []
        for _ in range(plan.history_reads):
            started = time.perf_counter()
            call()
            samples.append((time.perf_counter() - started) * 1000.0)
        return percentile(samples, 0.5)

    out: Figures = {}
    for label, filler in (("small", plan.filler_small), ("large", plan.filler_large)):
        fresh_database(DATABASE)
        with connect(DATABASE) as conn:
            if filler:
                conn.execute(SQL_FILLER, {"n": filler})
            conn.execute(SQL_COUNTER_FILLER)
        vacuum_analyze(DATABASE)
        close_connections()
        median_ms(lambda: generate_latest(metrics_registry()))  # a first read opens the connection
        out[f"history_scrape_{label}_ms"] = median_ms(lambda: generate_latest(metrics_registry()))
        out[f"history_queues_{label}_ms"] = median_ms(operator.inspect_queues)
        out[f"history_dashboard_{label}_ms"] = median_ms(lambda: operator.inspect_dashboard("7d"))
        out[f"history_sorted_list_{label}_ms"] = median_ms(
            lambda: (operator.list_jobs(order="-attempts", limit=50), operator.count_jobs())
        )
    close_connections()
    out["history_scrape_ratio"] = out["history_scrape_large_ms"] / out["history_scrape_small_ms"]
    out["history_queues_ratio"] = out["history_queues_large_ms"] / out["history_queues_small_ms"]
    out["history_dashboard_ratio"] = out["history_dashboard_large_ms"] / out["history_dashboard_small_ms"]
    return out


SQL_BACKFILL_ROWS = "INSERT INTO bench_rows (value) SELECT 0 FROM generate_series(1, %(n)s)"
SQL_KEYSET_PAGE = "SELECT id FROM bench_rows WHERE id > %(after)s ORDER BY id LIMIT %(batch)s"
SQL_TOUCH = "UPDATE bench_rows SET value = 1 WHERE id = ANY(%(ids)s)"


def hand_keyset_loop(execute: Any, batch: int, rate: float) -> int:
    """What a team writes by hand: keyset pages of ``batch`` ids, the same UPDATE per page, at most
    ``rate`` pages a second; answers the rows touched. ``execute(sql, params)`` answers the rows of a
    SELECT: a Django cursor's (the loop a Django team writes, in a management command) or a bare psycopg
    connection's (the same loop outside Django, for reference)."""
    after, touched = 0, 0
    while True:
        page_started = time.perf_counter()
        ids = [row[0] for row in execute(SQL_KEYSET_PAGE, {"after": after, "batch": batch})]
        if ids:
            execute(SQL_TOUCH, {"ids": ids})
            touched += len(ids)
            after = ids[-1]
        if len(ids) < batch:
            return touched
        pause = 1 / rate - (time.perf_counter() - page_started)
        if pause > 0:
            time.sleep(pause)


def django_execute(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """One statement on Django's connection under the bench settings, as a hand-written loop runs it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description is not None else []


def hand_orm_loop(batch: int, rate: float) -> int:
    """The same loop written with the ORM, as a Django team writes it when its UPDATE needs the model
    instances: keyset pages of ``batch`` ``BenchRow`` instances, then the same UPDATE of their ids, at
    most ``rate`` pages a second; answers the rows touched."""
    from bench.models import BenchRow

    after, touched = 0, 0
    while True:
        page_started = time.perf_counter()
        rows = list(BenchRow.objects.filter(pk__gt=after).order_by("pk")[:batch])
        if rows:
            django_execute(SQL_TOUCH, {"ids": [row.pk for row in rows]})
            touched += len(rows)
            after = rows[-1].pk
        if len(rows) < batch:
            return touched
        pause = 1 / rate - (time.perf_counter() - page_started)
        if pause > 0:
            time.sleep(pause)


def timed_loop(execute: Any) -> float:
    started = time.perf_counter()
    touched = hand_keyset_loop(execute, 1_000, 200.0)
    return touched / (time.perf_counter() - started)


def timed_orm_loop() -> float:
    started = time.perf_counter()
    touched = hand_orm_loop(1_000, 200.0)
    return touched / (time.perf_counter() - started)


def case_backfill(sub: Subject, plan: Plan, log: Path) -> Figures:
    """A backfill pass over ``plan.backfill_rows`` rows at ``rate=200, batch=1000`` in one worker process
    (rows/s from the ledger's own started/completed stamps), against :func:`hand_keyset_loop` doing the
    same UPDATE at the same cap in the bench process on Django's connection (and, for reference, on a bare
    psycopg connection, which binds parameters server-side where Django's default cursor binds them
    client-side) and against :func:`hand_orm_loop` (the same loop reading model instances through the ORM,
    the like-for-like reference of the model-instance pass); and the worker's RSS after 10,000 rows and at
    the end. Two passes, each on a fresh database: the source as model instances (``BenchRow.objects.all()``, what
    the README shows first) and as ``values_list("pk", flat=True)`` (the ids the hand loop reads too)."""
    from bench.jobs import bench_backfill, bench_backfill_pks

    fresh_backfill_rows(plan)
    hand_rate = timed_loop(django_execute)
    close_connections()
    fresh_backfill_rows(plan)
    with connect(DATABASE) as conn:

        def bare_execute(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []

        bare_rate = timed_loop(bare_execute)
    fresh_backfill_rows(plan)
    orm_rate = timed_orm_loop()
    close_connections()
    out: Figures = {
        "backfill_hand_rows_per_s": hand_rate,
        "backfill_bare_rows_per_s": bare_rate,
        "backfill_orm_rows_per_s": orm_rate,
    }
    for label, handle in (("", bench_backfill), ("pks_", bench_backfill_pks)):
        fresh_backfill_rows(plan)
        rate, rss_early, rss_end = one_backfill_pass(handle, sub, plan, log)
        out[f"backfill_{label}rows_per_s"] = rate
        out[f"backfill_{label}ratio"] = rate / hand_rate
        if not label:
            out.update(
                backfill_orm_ratio=rate / orm_rate,
                backfill_rss_early_kb=rss_early,
                backfill_rss_end_kb=rss_end,
                backfill_rss_ratio=rss_end / rss_early,
            )
    return out


def fresh_backfill_rows(plan: Plan) -> None:
    fresh_database(DATABASE)
    with connect(DATABASE) as conn:
        conn.execute(SQL_BACKFILL_ROWS, {"n": plan.backfill_rows})
    vacuum_analyze(DATABASE)
    close_connections()


def one_backfill_pass(handle: Any, sub: Subject, plan: Plan, log: Path) -> tuple[float, float, float]:
    """Enqueue ``handle``'s pass, run it in one worker process; answers (rows/s, RSS after 10 pages, RSS
    at the end)."""
    queued = handle.enqueue({})
    close_connections()
    with connect(DATABASE) as conn, workers([spawn_argv(sub, plan.slots, log)]) as procs:
        alive = check_alive(procs)

        def steps() -> int:
            alive()
            return int(scalar(conn, "SELECT count(*) FROM x_job_steps WHERE job_id = %s", [queued.id]))

        wait_until(lambda: steps() >= 10, timeout=120.0, interval=0.05, what="10 backfill pages")
        rss_early = procs[0].rss_kb()

        def completed() -> bool:
            alive()
            row = conn.execute(
                "SELECT status FROM x_backfills WHERE job_id = %s ORDER BY started_at DESC LIMIT 1", [queued.id]
            ).fetchone()
            return row is not None and row[0] == "completed"

        wait_until(completed, timeout=600.0, interval=0.1, what="the backfill pass")
        rss_end = procs[0].rss_kb()
        rows, seconds = conn.execute(
            "SELECT rows_processed, extract(epoch from completed_at - started_at) FROM x_backfills WHERE job_id = %s",
            [queued.id],
        ).fetchone() or (0, 0)
    return float(rows) / float(seconds), rss_early, rss_end


def plain_csv_export(path: Path) -> int:
    """What a team writes by hand: one ``csv.writer`` over the QuerySet's ``.iterator()`` into one file;
    answers the rows written."""
    from bench.models import BenchRow

    written = 0
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "value"])
        for row in BenchRow.objects.all().order_by("pk").iterator(chunk_size=5_000):
            writer.writerow([row.pk, row.value])
            written += 1
    return written


def case_export(sub: Subject, plan: Plan, log: Path) -> Figures:
    """``bench_export`` (``export_rows``, batch 5,000, one CSV part per page into a ``FileSystemStorage``) over
    ``plan.export_rows`` rows in one worker process — rows/s from its steps' own stamps, the first page's
    start to the manifest's end — against :func:`plain_csv_export` over the same QuerySet in the bench
    process. Both write to a temporary folder removed afterwards."""
    from bench.jobs import EXPORT_DIR_ENV, bench_export

    fresh_database(DATABASE)
    with connect(DATABASE) as conn:
        conn.execute(SQL_BACKFILL_ROWS, {"n": plan.export_rows})
    vacuum_analyze(DATABASE)
    with tempfile.TemporaryDirectory(prefix="bench-export-") as folder:
        started = time.perf_counter()
        plain = plain_csv_export(Path(folder) / "plain.csv")
        plain_rate = plain / (time.perf_counter() - started)
        close_connections()
        queued = bench_export.enqueue({"run": "1"})
        close_connections()
        spec = spawn_argv(sub, plan.slots, log, env={EXPORT_DIR_ENV: folder})
        with connect(DATABASE) as conn, workers([spec]) as procs:
            alive = check_alive(procs)

            def done() -> bool:
                alive()
                return scalar(conn, "SELECT state FROM x_jobs WHERE id = %s", [queued.id]) == "done"

            wait_until(done, timeout=600.0, interval=0.1, what="the export")
            seconds = float(
                scalar(
                    conn,
                    "SELECT extract(epoch from max(finished_at) - min(started_at)) FROM x_job_steps WHERE job_id = %s",
                    [queued.id],
                )
            )
        manifest = json.loads((Path(folder) / "bench-export" / "1" / "manifest.json").read_text())
    if manifest["rows"] != plain:
        raise RuntimeError(f"the export wrote {manifest['rows']} rows and the plain loop {plain}")
    ours_rate = manifest["rows"] / seconds
    return {
        "export_rows_per_s": ours_rate,
        "export_plain_rows_per_s": plain_rate,
        "export_ratio": ours_rate / plain_rate,
    }


STEPS_QUEUE = "bench_steps"  # bench/io_jobs.py's (not imported here: see bench/io_enqueue.py)


def case_steps(sub: Subject, plan: Plan, log: Path) -> Figures:
    """What a transactional step costs: ``plan.claim_n`` jobs of one step that writes the job's own
    ``bench_rows`` row through the ORM (``value + 1``) — as a ``step.run``, then as a ``step.atomic`` — each
    drained by one worker process at ``plan.slots`` slots from a fresh database; the steady rate of each, and
    their quotient. Every row must read 1 after a drain (written once) or the measurement fails."""
    out: Figures = {}
    for variant in ("run", "atomic"):
        name, n = f"bench_step_{variant}", plan.claim_n
        fresh_database(DATABASE)
        with connect(DATABASE) as conn:
            seed_io_rows(conn, n)
        io_enqueue("steps", variant, n, plan.preload_batch)
        vacuum_analyze(DATABASE)
        argv = [*worker_argv(plan.slots), "--queues", STEPS_QUEUE]
        with workers([WorkerProcess(argv=argv, env={**ENV, **IO_ENV}, log_path=log)]) as procs:
            wait_drained(sub, procs, n, name)
        with connect(DATABASE) as conn:
            first, last = completion_span(conn, name)
            written = io_rows_written(conn)
        if written != n:
            raise RuntimeError(f"steps {variant}: {written} of {n} rows read 1 after the drain")
        out[f"steps_{variant}_steady"] = (n - 1) / (last - first)
    out["steps_atomic_over_run"] = out["steps_atomic_steady"] / out["steps_run_steady"]
    return out


# -- the fairness case: a noisy org against a quiet one (bench/fair_jobs.py, under bench.settings_fair) --------

FAIR_ENV = {"DJANGO_SETTINGS_MODULE": "bench.settings_fair"}
FAIR_QUEUE = "bench_fair"  # bench/fair_jobs.py's queues (not imported here: see bench/fair_client.py)
PLAIN_QUEUE = "bench_plain"
FAIR_NOOP = "bench_org_noop"
NOISY_ORG, QUIET_ORG = "A", "B"


def fair_client_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench.fair_client", *args]


def fair_backlog(queue: str, n: int, size: int) -> None:
    """Org A's ``n`` no-op jobs into ``queue``, loaded by ``python -m bench.fair_client backlog`` (``enqueue_many``,
    ``size`` at a time); ``RuntimeError`` with its reason when it cannot."""
    argv = fair_client_argv("backlog", queue, NOISY_ORG, str(n), str(size))
    done = subprocess.run(argv, cwd=ROOT, env={**os.environ, **FAIR_ENV}, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"fairness backlog into {queue}: {tail}")


@contextlib.contextmanager
def quiet_org(queue: str, kind: str, plan: Plan) -> Iterator[Callable[[], dict[int, float]]]:
    """Start org B's probe process (``python -m bench.fair_client probes``: ``plan.fair_probes`` probes into
    ``queue``, one every ``plan.latency_interval_s``) and yield ``send``: tell it to go, wait until it has sent
    them, answer ``n -> the wall clock just after probe n's enqueue returned``. Started before the worker, so its
    start-up is over when the worker is up; always ended."""
    argv = fair_client_argv("probes", queue, QUIET_ORG, kind, str(plan.fair_probes), str(plan.latency_interval_s))
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, **FAIR_ENV},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def send() -> dict[int, float]:
        out, err = proc.communicate("go\n", timeout=plan.fair_probes * plan.latency_interval_s + 60.0)
        if proc.returncode != 0:
            tail = "\n".join(err.strip().splitlines()[-5:])
            raise RuntimeError(f"fairness probes into {queue} (exit {proc.returncode}): {tail}")
        return {int(n): float(at) for n, at in json.loads(out.splitlines()[-1])["sent"].items()}

    try:
        yield send
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def fair_worker(queue: str, plan: Plan, log: Path) -> WorkerProcess:
    """One worker process at ``plan.slots`` slots serving ``queue`` alone, under ``bench.settings_fair``."""
    return WorkerProcess(argv=[*worker_argv(plan.slots), "--queues", queue], env=FAIR_ENV, log_path=log)


def case_fairness(sub: Subject, plan: Plan, part: str, log: Path) -> Figures:
    """One measurement of the fairness case (``bench.plan.FAIRNESS_PARTS``), from a fresh database, one worker
    process at ``plan.slots`` slots serving the measured queue alone: ``bench_fair`` (named in ``FAIR_QUEUES``)
    or ``bench_plain`` (the same jobs, not named). ``off``/``on``: the noisy neighbour (:func:`noisy_neighbour`);
    ``idle``: org B's probes into the idle fair queue, the baseline; ``noop_off``/``noop_on``: what a fair claim
    costs a no-op drain of one org (:func:`one_org_drain`)."""
    queue = FAIR_QUEUE if part in ("on", "idle", "noop_on") else PLAIN_QUEUE
    if part.startswith("noop_"):
        return {f"fairness_{part}_steady": one_org_drain(sub, plan, queue, log)}
    return noisy_neighbour(sub, plan, part, queue, 0 if part == "idle" else plan.fair_backlog, log)


def one_org_drain(sub: Subject, plan: Plan, queue: str, log: Path) -> float:
    """The steady rate (jobs/s) of ``plan.claim_n`` no-op jobs of org A, loaded into ``queue`` and vacuumed, then
    drained by one worker process."""
    n = plan.claim_n
    fresh_database(DATABASE)
    fair_backlog(queue, n, plan.preload_batch)
    vacuum_analyze(DATABASE)
    with workers([fair_worker(queue, plan, log)]) as procs:
        wait_drained(sub, procs, n, FAIR_NOOP)
    with connect(DATABASE) as conn:
        first, last = completion_span(conn, FAIR_NOOP)
    return (n - 1) / (last - first)


def noisy_neighbour(sub: Subject, plan: Plan, part: str, queue: str, backlog: int, log: Path) -> Figures:
    """Org A's ``backlog`` no-op jobs loaded into ``queue`` and vacuumed (none for the idle baseline), org B's probe
    process started, then the worker; once the worker is up (for the idle baseline, after a further
    ``plan.latency_idle_s``), B's probes are sent while A drains. B's pickup latency (ms) is a probe body's start
    minus the time its enqueue returned, as in the latency case, over the probes sent before A's last completion
    (the probes sent after it met an idle queue); with a backlog, how many those were and A's steady rate. A
    backlog that drained before B's first probe was sent fails the measurement, as does any job not done."""
    kind = f"fair_{part}"
    fresh_database(DATABASE)
    if backlog:
        fair_backlog(queue, backlog, plan.preload_batch)
        vacuum_analyze(DATABASE)
    with quiet_org(queue, kind, plan) as send, workers([fair_worker(queue, plan, log)]) as procs:
        procs[0].wait_ready()
        if not backlog:
            time.sleep(plan.latency_idle_s)
        sent = send()
        if backlog:
            wait_drained(sub, procs, backlog, FAIR_NOOP)
        with connect(DATABASE) as conn:
            alive = check_alive(procs)

            def settled() -> bool:
                alive()
                return len(probe_starts(conn, kind)) >= len(sent)

            wait_until(settled, timeout=60.0, interval=0.1, what=f"{len(sent)} probes of org B")
            starts = probe_starts(conn, kind)
            first, last = completion_span(conn, FAIR_NOOP) if backlog else (0.0, float("inf"))
    during = [n for n, at in sent.items() if at < last]
    if not during:
        raise RuntimeError(f"fairness {part}: org A's {backlog:,} jobs drained before org B's first probe was sent")
    values = [(starts[n] - sent[n]) * 1000.0 for n in during]
    out = {f"fairness_{part}_b_p50": percentile(values, 0.5), f"fairness_{part}_b_p95": percentile(values, 0.95)}
    if backlog:
        out[f"fairness_{part}_b_probes"] = float(len(during))
        out[f"fairness_{part}_a_steady"] = (backlog - 1) / (last - first)
    return out


def case_scheduler(plan: Plan, log: Path) -> Figures:
    from bench.scheduler_idle import measure_in_child

    fresh_database(DATABASE)
    close_connections()
    result = measure_in_child(plan.idle_s, plan.idle_warmup_s, log)
    return {"scheduler_idle_statements_per_min": float(result["statements_per_min"])}


def run_case(sub: Subject, case: str, params: dict[str, Any], plan: Plan, log: Path) -> Figures:
    """One case of one repetition for ours: the shared ones through the procedure, else ours only."""
    from bench import procedure

    close_connections()
    if case == "claim":
        return case_claim(sub, plan, log)
    if case == "memory":
        return case_memory(sub, plan, log)
    if case == "outbox":
        return case_outbox(sub, plan, log)
    if case == "scheduler":
        return case_scheduler(plan, log)
    if case == "history":
        return case_history(plan)
    if case == "backfill":
        return case_backfill(sub, plan, log)
    if case == "export":
        return case_export(sub, plan, log)
    if case == "steps":
        return case_steps(sub, plan, log)
    if case == "fairness":
        return case_fairness(sub, plan, params["part"], log)
    if case == "rates":
        from bench.rates import case_rates

        return case_rates(plan, params["driver"], log)
    return procedure.run_case(sub, case, params, plan, log)
