"""pgqueuer, measured the way bench/ours.py measures ultimate_jobs. Run by the bench with
``bench/.peers-venv/bin/python -m bench.peers.pgqueuer_bench run --plan JSON --log PATH``.

Documented API only: ``Queries(PsycopgDriver(conn)).install()`` (what ``pgq install`` runs),
``Queries.enqueue`` (scalar arguments for one job, lists for a batch), ``QueueManager`` with
``@qm.entrypoint`` async handlers and ``qm.run()`` at its defaults (batch_size 10, durable tables).
Finished jobs leave the ``pgqueuer`` table (a row in ``pgqueuer_log`` records them), so the backlog is
the count of rows left in ``pgqueuer``.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import signal
import sys
import time
from importlib.metadata import version
from typing import Any

import psycopg
from pgqueuer.db import PsycopgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

from bench.common import (
    LATENCY_TABLE,
    announce_ready_and_wait_for_go,
    conninfo,
    count_statements,
    ensure_database,
)
from bench.procedure import Subject, peer_main, peer_worker_argv

DATABASE = "bench_pgqueuer"
NOOP = "bench_noop"
PROBE = "bench_probe"


class Producer:
    """One event loop and one autocommit connection for every enqueue the bench makes."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.conn: psycopg.AsyncConnection[Any] = self.runner.run(
            psycopg.AsyncConnection.connect(conninfo(DATABASE), autocommit=True)
        )
        self.queries = Queries(PsycopgDriver(self.conn))
        atexit.register(self.close)

    def close(self) -> None:
        self.runner.run(self.conn.close())
        self.runner.close()

    def install(self) -> None:
        async def go() -> None:
            if not await self.queries.schema_is_installed():
                await self.queries.install()

        self.runner.run(go())

    def reset(self) -> None:
        self.runner.run(
            self.conn.execute(f"truncate pgqueuer, pgqueuer_log, pgqueuer_statistics, {LATENCY_TABLE} restart identity")
        )

    def enqueue_single(self, n: int) -> None:
        async def go() -> None:
            for _ in range(n):
                await self.queries.enqueue(NOOP, None)

        self.runner.run(go())

    def enqueue_batches(self, n: int, size: int) -> None:
        async def go() -> None:
            for start in range(0, n, size):
                count = min(size, n - start)
                await self.queries.enqueue([NOOP] * count, [None] * count, [0] * count)

        self.runner.run(go())

    def enqueue_probe(self, kind: str) -> None:
        payload = json.dumps({"kind": kind, "t": time.time()}).encode()
        self.runner.run(self.queries.enqueue(PROBE, payload))


def pending(conn: psycopg.Connection[Any]) -> bool:
    """A finished job's row leaves ``pgqueuer`` (deleted when its completion is flushed to the log)."""
    row = conn.execute("select exists (select 1 from pgqueuer where entrypoint = %s)", (NOOP,)).fetchone()
    return bool(row and row[0])


def finished(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "select count(*) from pgqueuer_log where entrypoint = %s and status = 'successful'", (NOOP,)
    ).fetchone()
    return int(row[0]) if row else -1


def subject() -> Subject:
    ensure_database(DATABASE)
    producer = Producer()
    return Subject(
        name="pgqueuer",
        version=version("pgqueuer"),
        database=DATABASE,
        worker_argv=peer_worker_argv("bench.peers.pgqueuer_bench"),
        install=producer.install,
        reset=producer.reset,
        enqueue_single=producer.enqueue_single,
        enqueue_batches=producer.enqueue_batches,
        enqueue_probe=producer.enqueue_probe,
        pending=pending,
        finished=finished,
        notes="QueueManager.run() defaults (batch_size=10, no max_concurrent_tasks); async no-op entrypoint",
    )


def worker_main(concurrency: int, count: bool) -> None:
    """One pgqueuer worker process: no-op and probe entrypoints; SIGTERM sets the shutdown event."""
    del concurrency  # pgqueuer's own default (batch_size=10, unbounded in-flight) is what is measured
    if count:
        count_statements()

    async def serve() -> None:
        conn = await psycopg.AsyncConnection.connect(conninfo(DATABASE), autocommit=True)
        side = await psycopg.AsyncConnection.connect(conninfo(DATABASE), autocommit=True)
        qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint(NOOP)
        async def bench_noop(job: Job) -> None:
            return None

        @qm.entrypoint(PROBE)
        async def bench_probe(job: Job) -> None:
            data = json.loads(job.payload or b"{}")
            latency_ms = (time.time() - data["t"]) * 1000.0
            await side.execute(
                f"insert into {LATENCY_TABLE} (kind, latency_ms) values (%s, %s)", (data["kind"], latency_ms)
            )

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, announce_ready_and_wait_for_go)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, qm.shutdown.set)
        await qm.run()
        await side.close()
        await conn.close()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(peer_main(subject, worker_main))
