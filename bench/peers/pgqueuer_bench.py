"""pgqueuer on asyncpg, its fastest documented driver, measured by the shared procedure. Run by the bench
with ``bench/.peers-venv/bin/python -m bench.peers.pgqueuer_bench case NAME --plan JSON --log PATH``.

Documented API only: the schema by ``Queries(AsyncpgDriver(conn)).install()`` (what ``pgq install``
runs); enqueue one per call with ``SyncQueries(SyncPsycopgDriver(psycopg.connect(dsn, autocommit=True)))
.enqueue(name, payload)`` (and ``Queries(AsyncpgDriver(conn)).enqueue`` as the async row), batches with
the list form ``enqueue([names], [payloads], [priorities])``; the worker is
``QueueManager(Queries(AsyncpgDriver(await asyncpg.connect(dsn))))`` with async ``@qm.entrypoint``
handlers. ``S`` slots run as ``qm.run(batch_size=S)`` — for S = 10 exactly ``qm.run()`` at its defaults,
pgqueuer's fastest documented configuration. ``max_concurrent_tasks`` stays at its default (no cap):
capping it at S forces a batch of S // 2 (pgqueuer refuses a cap below twice the batch size) and
measured pgqueuer at a third of its default speed, which would flatter ours. A finished job leaves the
``pgqueuer`` table and gets a ``successful`` row in ``pgqueuer_log`` whose ``created`` is when the
worker flushed that completion.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from importlib.metadata import version
from typing import Any

import asyncpg
import psycopg
from pgqueuer.db import AsyncpgDriver, SyncPsycopgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries, SyncQueries

from bench.common import LATENCY_TABLE, announce_ready, conninfo, dsn
from bench.procedure import Subject, module_subject, peer_main, peer_worker_argv, scalar, time_span

DATABASE = "bench_pgqueuer"
NOOP = "bench_noop"
PROBE = "bench_probe"


def install() -> None:
    async def go() -> None:
        conn = await asyncpg.connect(dsn(DATABASE))
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    asyncio.run(go())


def sync_queries() -> tuple[psycopg.Connection[Any], SyncQueries]:
    conn = psycopg.connect(conninfo(DATABASE), autocommit=True)
    return conn, SyncQueries(SyncPsycopgDriver(conn))


def enqueue_single(n: int) -> None:
    conn, queries = sync_queries()
    with conn:
        for _ in range(n):
            queries.enqueue(NOOP, None)


def enqueue_single_async(n: int) -> None:
    async def go() -> None:
        conn = await asyncpg.connect(dsn(DATABASE))
        queries = Queries(AsyncpgDriver(conn))
        for _ in range(n):
            await queries.enqueue(NOOP, None)
        await conn.close()

    asyncio.run(go())


def enqueue_batches(n: int, size: int) -> None:
    conn, queries = sync_queries()
    with conn:
        for start in range(0, n, size):
            count = min(size, n - start)
            queries.enqueue([NOOP] * count, [None] * count, [0] * count)


class ProbeSender:
    def __init__(self) -> None:
        self.conn, self.queries = sync_queries()

    def send(self, kind: str, n: int) -> None:
        self.queries.enqueue(PROBE, json.dumps({"kind": kind, "n": n}).encode())

    def close(self) -> None:
        self.conn.close()


def pending(conn: psycopg.Connection[Any]) -> bool:
    """A finished job's row leaves ``pgqueuer`` (deleted when its completion is flushed to the log)."""
    return bool(scalar(conn, "select exists (select 1 from pgqueuer where entrypoint = %s)", (NOOP,)))


SUCCESSFUL = "from pgqueuer_log where entrypoint = %s and status = 'successful'"


def finished(conn: psycopg.Connection[Any]) -> int:
    return int(scalar(conn, f"select count(*) {SUCCESSFUL}", (NOOP,)))


def completion_span(conn: psycopg.Connection[Any]) -> tuple[float, float]:
    return time_span(conn, "created", SUCCESSFUL, (NOOP,))


def subject() -> Subject:
    return module_subject(
        sys.modules[__name__],
        name="pgqueuer",
        version=version("pgqueuer"),
        database=DATABASE,
        notes="asyncpg worker, qm.run(batch_size=S) for S slots (S=10: qm.run() at its defaults), "
        "max_concurrent_tasks at its default (no cap); async no-op entrypoint; "
        "enqueue via SyncQueries(SyncPsycopgDriver), async row via Queries(AsyncpgDriver)",
        cases=("drain", "enqueue", "latency", "idle"),
        worker_argv=peer_worker_argv("bench.peers.pgqueuer_bench"),
        probe_sender=ProbeSender,
        extra_enqueue={"enqueue_single_async": enqueue_single_async},
    )


def worker_main(slots: int) -> None:
    """One pgqueuer worker process: no-op and probe entrypoints; SIGTERM sets the shutdown event."""

    async def serve() -> None:
        conn = await asyncpg.connect(dsn(DATABASE))
        side = await asyncpg.connect(dsn(DATABASE))
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint(NOOP)
        async def bench_noop(job: Job) -> None:
            return None

        @qm.entrypoint(PROBE)
        async def bench_probe(job: Job) -> None:
            started = time.time()
            data = json.loads(job.payload or b"{}")
            await side.execute(
                f"insert into {LATENCY_TABLE} (kind, n, started) values ($1, $2, $3)", data["kind"], data["n"], started
            )

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, qm.shutdown.set)
        announce_ready()
        await qm.run(batch_size=slots)
        await side.close()
        if not conn.is_closed():
            await conn.close()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(peer_main(subject, worker_main))
