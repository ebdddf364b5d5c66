"""ultimate_jobs on the SQLite driver: the bench's SQLite column — enqueue (one per call, and batched),
drain with ONE worker process, and pickup latency from another process (heard by the worker's watch on
``PRAGMA data_version``, its poll behind it).

The database is one file, ``bench/results/sqlite/bench.sqlite3``, copied from a migrated template before
every measurement. The bench process enqueues through ``SqliteDriver(alias="sqlite")`` (the ``sqlite``
alias of ``bench.settings``); a worker process is literally ``python manage.py jobs_worker --concurrency
S`` under ``bench.settings_sqlite`` (``DRIVER`` unset: it follows the database). Completion times are read
from ``x_jobs.finished_at`` with Python's ``sqlite3``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import (
    LATENCY_TABLE,
    ROOT,
    SQLITE_FILE,
    WorkerProcess,
    check_alive,
    paced,
    percentile,
    wait_until,
    workers,
)
from bench.plan import Plan
from bench.procedure import Figures, drain_key, timed

NAME = "ultimate_jobs sqlite"
TEMPLATE = SQLITE_FILE.with_name("template.sqlite3")
ENV = {"DJANGO_SETTINGS_MODULE": "bench.settings_sqlite"}
NOOP = "bench_noop"
CASES = ("drain", "enqueue", "latency")
DRAIN_TIMEOUT_S = 3_600.0
POLL_S = 0.05

_seq = itertools.count()


def info() -> dict[str, Any]:
    from bench.ours import version

    return {
        "version": f"{version()}, SQLite {sqlite3.sqlite_version}",
        "notes": "the sqlite driver on one file (WAL): python manage.py jobs_worker --concurrency S under "
        "bench.settings_sqlite, ONE worker process; enqueue handle.enqueue outside atomic(), batches "
        "handle.enqueue_many; pickup latency from the bench process is heard by the worker's watch on "
        "PRAGMA data_version (every 100 ms), its poll behind it",
        "cases": list(CASES),
    }


def _files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


def _close() -> None:
    from django.db import connections

    connections["sqlite"].close()


def prepare() -> None:
    """The template file: migrated by ``manage.py migrate`` under the worker's settings, plus the latency table."""
    TEMPLATE.parent.mkdir(parents=True, exist_ok=True)
    for path in _files(TEMPLATE):
        path.unlink(missing_ok=True)
    env = {**os.environ, **ENV, "BENCH_SQLITE_FILE": str(TEMPLATE)}
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    with sqlite3.connect(TEMPLATE) as conn:
        conn.execute(
            f"create table if not exists {LATENCY_TABLE} (kind text not null, n integer not null, started real)"
        )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def fresh() -> None:
    """``bench.sqlite3`` anew: the template's schema and no rows."""
    _close()
    for path in _files(SQLITE_FILE):
        path.unlink(missing_ok=True)
    shutil.copyfile(TEMPLATE, SQLITE_FILE)


@contextmanager
def installed() -> Iterator[Any]:
    """The SQLite driver over the ``sqlite`` alias as the process's driver for the block."""
    from ultimate_jobs.core.installed import set_job_driver
    from ultimate_jobs.drivers.sqlite.driver import SqliteDriver

    driver = SqliteDriver(alias="sqlite")
    set_job_driver(driver)
    try:
        yield driver
    finally:
        set_job_driver(None)
        _close()


def enqueue_single(n: int) -> None:
    from bench.jobs import bench_noop

    with installed():
        for _ in range(n):
            bench_noop.enqueue({"n": next(_seq)})


def enqueue_batches(n: int, size: int) -> None:
    from bench.jobs import bench_noop

    with installed():
        for start in range(0, n, size):
            bench_noop.enqueue_many([{"n": next(_seq)} for _ in range(min(size, n - start))])


def _query(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(SQLITE_FILE, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _epoch(text: str) -> float:
    return (datetime.fromisoformat(text) - datetime(1970, 1, 1)).total_seconds()


def worker(slots: int, log: Path) -> WorkerProcess:
    argv = [sys.executable, "manage.py", "jobs_worker", "--concurrency", str(slots)]
    return WorkerProcess(argv=argv, env={**ENV, "BENCH_SQLITE_FILE": str(SQLITE_FILE)}, log_path=log)


def case_enqueue(plan: Plan) -> Figures:
    fresh()
    out = {"enqueue_single": plan.enqueue_single_n / timed(lambda: enqueue_single(plan.enqueue_single_n))}
    fresh()
    seconds = timed(lambda: enqueue_batches(plan.enqueue_batch_n, plan.enqueue_batch_size))
    out["enqueue_batch"] = plan.enqueue_batch_n / seconds
    return out


def case_drain(plan: Plan, config: dict[str, int], log: Path) -> Figures:
    """ONE worker process drains a backlog of ``n``; other process counts are not measured on SQLite."""
    if config["processes"] != 1:
        return {}
    n, key = config["n"], drain_key(config)
    fresh()
    preload = n / timed(lambda: enqueue_batches(n, plan.preload_batch))
    pending_sql = "select exists (select 1 from x_jobs where name = ? and state not in ('done', 'failed', 'dead'))"
    with workers([worker(config["slots"], log)]) as procs:
        alive = check_alive(procs)

        def drained() -> bool:
            alive()
            return not _query(pending_sql, (NOOP,))[0][0]

        wait_until(drained, timeout=DRAIN_TIMEOUT_S, interval=POLL_S, what=f"{NAME} to drain {n} jobs")
        seen = time.time()
        t0 = procs[0].spawned_at
    [(done, first, last)] = _query(
        "select count(*), min(finished_at), max(finished_at) from x_jobs where name = ? and state = 'done'", (NOOP,)
    )
    if done != n:
        raise RuntimeError(f"{NAME}: {done} of {n} jobs finished successfully")
    first_s, last_s = _epoch(first), _epoch(last)
    return {
        f"{key}_spawn": n / (seen - t0),
        f"{key}_spawn_s": seen - t0,
        f"{key}_steady": (n - 1) / (last_s - first_s) if last_s > first_s else float("nan"),
        f"{key}_first_completion_s": first_s - t0,
        f"{key}_preload": preload,
    }


def case_latency(plan: Plan, log: Path) -> Figures:
    """Pickup latency (ms) from this process — another process than the worker's, so the worker hears of
    the row through its watch (or its poll): one idle worker, one probe every ``plan.latency_interval_s``."""
    from bench.jobs import bench_probe

    fresh()
    enqueued: dict[int, float] = {}
    with workers([worker(plan.slots, log)]) as procs, installed():
        procs[0].wait_ready()
        time.sleep(plan.latency_idle_s)
        for i in paced(plan.latency_n, plan.latency_interval_s):
            bench_probe.enqueue({"kind": "probe", "n": i, "seq": next(_seq)})
            enqueued[i] = time.time()
        alive = check_alive(procs)

        def settled() -> bool:
            alive()
            return len(_query(f"select n from {LATENCY_TABLE} where kind = 'probe'")) >= plan.latency_n

        wait_until(settled, timeout=60.0, interval=0.1, what=f"{plan.latency_n} probes")
        starts = dict(_query(f"select n, started from {LATENCY_TABLE} where kind = 'probe'"))
    values = [(starts[i] - enqueued[i]) * 1000.0 for i in enqueued]
    return {"latency_p50": percentile(values, 0.5), "latency_p95": percentile(values, 0.95), "latency_max": max(values)}


def run_case(case: str, params: dict[str, Any], plan: Plan, log: Path) -> Figures:
    """One case of one repetition; raw figures by key."""
    if case == "enqueue":
        return case_enqueue(plan)
    if case == "drain":
        return case_drain(plan, params, log)
    if case == "latency":
        return case_latency(plan, log)
    raise ValueError(f"{NAME} has no case {case!r}")
