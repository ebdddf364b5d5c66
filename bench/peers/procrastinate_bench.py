"""Procrastinate, measured by the shared procedure. Run by the bench with
``bench/.peers-venv/bin/python -m bench.peers.procrastinate_bench case NAME --plan JSON --log PATH``.

Documented API only: ``App(connector=PsycopgConnector(conninfo=...))``, ``@app.task(name=...)`` async
tasks, ``schema_manager.apply_schema_async()`` (what ``procrastinate schema --apply`` runs), ``task.defer``
(one job, one transaction) and ``task.batch_defer`` (many in one statement) inside ``app.open()``, and
``app.run_worker_async(concurrency=S)`` with its other options at their defaults. Jobs are kept after they
finish (``delete_jobs="never"``, the default), so the backlog is the count of ``todo``/``doing`` rows, and
each completion is a ``succeeded`` row in ``procrastinate_events`` stamped with its transaction's time.
"""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import version
from typing import Any

import psycopg

from bench.common import announce_ready, conninfo
from bench.peers.procrastinate_app import DATABASE, app, bench_noop, bench_probe, side
from bench.procedure import Subject, module_subject, peer_main, peer_worker_argv, scalar, time_span


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


def pending(conn: psycopg.Connection[Any]) -> bool:
    sql = "select exists (select 1 from procrastinate_jobs where status in ('todo', 'doing') and task_name = %s)"
    return bool(scalar(conn, sql, ("bench_noop",)))


def finished(conn: psycopg.Connection[Any]) -> int:
    sql = "select count(*) from procrastinate_jobs where task_name = %s and status = 'succeeded'"
    return int(scalar(conn, sql, ("bench_noop",)))


def completion_span(conn: psycopg.Connection[Any]) -> tuple[float, float]:
    rest = (
        "from procrastinate_events e join procrastinate_jobs j on j.id = e.job_id "
        "where e.type = 'succeeded' and j.task_name = %s"
    )
    return time_span(conn, "e.at", rest, ("bench_noop",))


def subject() -> Subject:
    return module_subject(
        sys.modules[__name__],
        name="procrastinate",
        version=version("procrastinate"),
        database=DATABASE,
        notes="run_worker_async(concurrency=S), other worker options at their defaults; async no-op task; "
        "enqueue task.defer / batch_defer in app.open()",
        cases=("drain", "enqueue", "latency", "idle"),
        worker_argv=peer_worker_argv("bench.peers.procrastinate_bench"),
        probe_sender=ProbeSender,
    )


def worker_main(slots: int) -> None:
    """One Procrastinate worker process; its own signal handlers stop it on SIGTERM."""

    async def serve() -> None:
        side["conn"] = await psycopg.AsyncConnection.connect(conninfo(DATABASE), autocommit=True)
        async with app.open_async():
            announce_ready()
            await app.run_worker_async(concurrency=slots)
        await side["conn"].close()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(peer_main(subject, worker_main))
