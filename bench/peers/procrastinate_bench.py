"""Procrastinate, measured by the shared procedure. Run by the bench with
``bench/.peers-venv/bin/python -m bench.peers.procrastinate_bench case NAME --plan JSON --log PATH``.

Documented API only: ``App(connector=PsycopgConnector(conninfo=...))``, ``@app.task(name=...)`` async
tasks, ``schema_manager.apply_schema_async()`` (what ``procrastinate schema --apply`` runs), ``task.defer``
(one job, one transaction) and ``task.batch_defer`` (many in one statement) inside ``app.open()``, and
``app.run_worker_async(concurrency=S)`` with its other options at their defaults. Jobs are kept after they
finish (``delete_jobs="never"``, the default), so the backlog is the count of ``todo``/``doing`` rows, and
each completion is a ``succeeded`` row in ``procrastinate_events`` stamped with its transaction's time.

The io case runs its async tasks at ``run_worker_async(concurrency=M)`` (M = ``plan.io_in_flight``: M
sub-workers), the app's connector given a pool of ``IO_QUEUE_POOL`` connections for that worker
(``app.replace_connector``) — its docs: sub-workers waiting for a pool connection is suboptimal, and the
default pool has 4. The ``orm`` task reads and writes its row through a ``psycopg_pool.AsyncConnectionPool`` of
10 connections (autocommit; as many as pgqueuer's asyncpg pool) handed over in ``additional_context``.
"""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import version
from typing import Any

import psycopg
import psycopg_pool
from procrastinate import PsycopgConnector

from bench.common import announce_ready, conninfo
from bench.peers.procrastinate_app import DATABASE, IO_TASKS, app, bench_noop, bench_probe, side
from bench.procedure import (
    IoSpec,
    Subject,
    module_subject,
    peer_io_argv,
    peer_main,
    peer_worker_argv,
    scalar,
    time_span,
)

MODULE = "bench.peers.procrastinate_bench"
IO_QUEUE_POOL = 20  # the connector's pool in the io worker (fetches and completions of M sub-workers)
IO_BODY_POOL = 10  # the orm task's own pool


def install() -> None:
    async def go() -> None:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(go())


def enqueue_single(n: int) -> None:
    with app.open():
        for _ in range(n):
            bench_noop.defer()


def enqueue_batches(n: int, size: int) -> None:
    with app.open():
        for start in range(0, n, size):
            bench_noop.batch_defer(*({} for _ in range(min(size, n - start))))


class ProbeSender:
    def __init__(self) -> None:
        self.opened = app.open()
        self.opened.__enter__()

    def send(self, kind: str, n: int) -> None:
        bench_probe.defer(kind=kind, n=n)

    def close(self) -> None:
        self.opened.__exit__(None, None, None)


def pending(conn: psycopg.Connection[Any], name: str = "bench_noop") -> bool:
    sql = "select exists (select 1 from procrastinate_jobs where status in ('todo', 'doing') and task_name = %s)"
    return bool(scalar(conn, sql, (name,)))


def finished(conn: psycopg.Connection[Any], name: str = "bench_noop") -> int:
    sql = "select count(*) from procrastinate_jobs where task_name = %s and status = 'succeeded'"
    return int(scalar(conn, sql, (name,)))


def completion_span(conn: psycopg.Connection[Any], name: str = "bench_noop") -> tuple[float, float]:
    rest = (
        "from procrastinate_events e join procrastinate_jobs j on j.id = e.job_id "
        "where e.type = 'succeeded' and j.task_name = %s"
    )
    return time_span(conn, "e.at", rest, (name,))


def io_name(body: str, variant: str) -> str:
    return f"bench_io_{body}"


def io_enqueue(body: str, variant: str, n: int, size: int) -> None:
    """Jobs for rows ``1..n`` with ``task.batch_defer(row=i, ...)`` inside ``app.open()``."""
    task = IO_TASKS[body]
    with app.open():
        for start in range(1, n + 1, size):
            task.batch_defer(*({"row": row} for row in range(start, min(start + size, n + 1))))


def subject() -> Subject:
    return module_subject(
        sys.modules[__name__],
        name="procrastinate",
        version=version("procrastinate"),
        database=DATABASE,
        notes="run_worker_async(concurrency=S), other worker options at their defaults; async no-op task; "
        "enqueue task.defer / batch_defer in app.open(); io case (M in flight): run_worker_async(concurrency=M), "
        f"the connector's pool {IO_QUEUE_POOL} connections (app.replace_connector), async tasks; orm task: a "
        f"psycopg_pool.AsyncConnectionPool of {IO_BODY_POOL} (autocommit) in additional_context, "
        "one select + one update, each on a pool connection",
        cases=("drain", "enqueue", "latency", "idle", "io"),
        worker_argv=peer_worker_argv(MODULE),
        probe_sender=ProbeSender,
        io=IoSpec(variants=("async",), name=io_name, enqueue=io_enqueue, worker_argv=peer_io_argv(MODULE)),
    )


def io_worker_main(in_flight: int, body: str) -> None:
    """One Procrastinate worker process running the io tasks with ``in_flight`` sub-workers."""

    async def serve() -> None:
        pool = psycopg_pool.AsyncConnectionPool(
            conninfo(DATABASE), min_size=IO_BODY_POOL, kwargs={"autocommit": True}, open=False
        )
        await pool.open()
        connector = PsycopgConnector(conninfo=conninfo(DATABASE), min_size=4, max_size=IO_QUEUE_POOL)
        try:
            with app.replace_connector(connector):
                async with app.open_async():
                    announce_ready()
                    await app.run_worker_async(concurrency=in_flight, additional_context={"pool": pool})
        finally:
            await pool.close()

    asyncio.run(serve())


def worker_main(slots: int, body: str) -> None:
    """One Procrastinate worker process (an io ``body``: :func:`io_worker_main`); its own signal handlers
    stop it on SIGTERM."""
    if body != "noop":
        io_worker_main(slots, body)
        return

    async def serve() -> None:
        side["conn"] = await psycopg.AsyncConnection.connect(conninfo(DATABASE), autocommit=True)
        async with app.open_async():
            announce_ready()
            await app.run_worker_async(concurrency=slots)
        await side["conn"].close()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(peer_main(subject, worker_main))
