"""Procrastinate, measured the way bench/ours.py measures ultimate_jobs. Run by the bench with
``bench/.peers-venv/bin/python -m bench.peers.procrastinate_bench run --plan JSON --log PATH``.

Documented API only: ``App(connector=PsycopgConnector(conninfo=...))``, ``@app.task(name=...)`` async
tasks, ``schema_manager.apply_schema_async()`` (what ``procrastinate schema --apply`` runs),
``task.defer_async`` (one job, one transaction), ``task.batch_defer_async`` (many in one statement) and
``app.run_worker_async(concurrency=N)`` with its other options at their defaults. Jobs are kept after
they finish (``delete_jobs="never"``, the default), so the backlog is the count of ``todo``/``doing`` rows.
"""

from __future__ import annotations

import asyncio
import atexit
import sys
import time
from importlib.metadata import version
from typing import Any

import psycopg

from bench.common import LATENCY_TABLE, announce_ready_and_wait_for_go, conninfo, count_statements, ensure_database
from bench.peers.procrastinate_app import DATABASE, app, bench_noop, bench_probe, side
from bench.procedure import Subject, peer_main, peer_worker_argv


class Producer:
    """One event loop with the app open for every defer the bench makes."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()

        async def open_app() -> None:
            await app.open_async()

        self.runner.run(open_app())
        atexit.register(self.close)

    def close(self) -> None:
        async def close_app() -> None:
            await app.close_async()

        self.runner.run(close_app())
        self.runner.close()

    def install(self) -> None:
        async def go() -> None:
            async with await psycopg.AsyncConnection.connect(conninfo(DATABASE), autocommit=True) as conn:
                cur = await conn.execute("select to_regclass('procrastinate_jobs') is not null")
                row = await cur.fetchone()
            if not (row and row[0]):
                await app.schema_manager.apply_schema_async()

        self.runner.run(go())

    def reset(self) -> None:
        async def go() -> None:
            async with await psycopg.AsyncConnection.connect(conninfo(DATABASE), autocommit=True) as conn:
                await conn.execute(
                    "truncate procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers, "
                    f"procrastinate_workers, {LATENCY_TABLE} restart identity cascade"
                )

        self.runner.run(go())

    def enqueue_single(self, n: int) -> None:
        async def go() -> None:
            for _ in range(n):
                await bench_noop.defer_async()

        self.runner.run(go())

    def enqueue_batches(self, n: int, size: int) -> None:
        async def go() -> None:
            for start in range(0, n, size):
                await bench_noop.batch_defer_async(*({} for _ in range(min(size, n - start))))

        self.runner.run(go())

    def enqueue_probe(self, kind: str) -> None:
        self.runner.run(bench_probe.defer_async(kind=kind, t=time.time()))


def pending(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute(
        "select exists (select 1 from procrastinate_jobs "
        "where status in ('todo', 'doing') and task_name = 'bench_noop')"
    ).fetchone()
    return bool(row and row[0])


def finished(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "select count(*) from procrastinate_jobs where task_name = 'bench_noop' and status = 'succeeded'"
    ).fetchone()
    return int(row[0]) if row else -1


def subject() -> Subject:
    ensure_database(DATABASE)
    producer = Producer()
    return Subject(
        name="procrastinate",
        version=version("procrastinate"),
        database=DATABASE,
        worker_argv=peer_worker_argv("bench.peers.procrastinate_bench"),
        install=producer.install,
        reset=producer.reset,
        enqueue_single=producer.enqueue_single,
        enqueue_batches=producer.enqueue_batches,
        enqueue_probe=producer.enqueue_probe,
        pending=pending,
        finished=finished,
        notes="run_worker_async(concurrency=N), other worker options at their defaults; async no-op task",
    )


def worker_main(concurrency: int, count: bool) -> None:
    """One Procrastinate worker process; its own signal handlers stop it on SIGTERM."""
    if count:
        count_statements()

    async def serve() -> None:
        side["conn"] = await psycopg.AsyncConnection.connect(conninfo(DATABASE), autocommit=True)
        async with app.open_async():
            await asyncio.get_running_loop().run_in_executor(None, announce_ready_and_wait_for_go)
            await app.run_worker_async(concurrency=concurrency)
        await side["conn"].close()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(peer_main(subject, worker_main))
