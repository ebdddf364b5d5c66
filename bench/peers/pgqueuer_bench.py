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

The io case runs its async bodies with in-flight count M (``plan.io_in_flight``) as
``qm.run(batch_size=M // 2, max_concurrent_tasks=M)``: ``max_concurrent_tasks`` is pgqueuer's documented
per-process cap on picked jobs (without it one worker picks the whole backlog at once), and M // 2 the largest
batch that cap allows (pgqueuer refuses a cap below twice the batch; its tuning guide advises a larger batch for
jobs under a second). The ``orm`` body reads and writes its row through an ``asyncpg.create_pool`` pool at
asyncpg's defaults (10 connections), handed to the jobs as ``QueueManager(resources=...)`` — pgqueuer's
documented way to share a pool — and read from the injected ``Context``. That worker runs under uvloop, as
``pgq run`` runs a worker (uvloop is one of pgqueuer's dependencies).
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
from pgqueuer.models import Context, Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries, SyncQueries

from bench.common import IO_SLEEP_S, IO_TABLE, LATENCY_TABLE, announce_ready, conninfo, dsn
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

DATABASE = "bench_pgqueuer"
NOOP = "bench_noop"
PROBE = "bench_probe"
MODULE = "bench.peers.pgqueuer_bench"


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


def pending(conn: psycopg.Connection[Any], name: str = NOOP) -> bool:
    """A finished job's row leaves ``pgqueuer`` (deleted when its completion is flushed to the log)."""
    return bool(scalar(conn, "select exists (select 1 from pgqueuer where entrypoint = %s)", (name,)))


SUCCESSFUL = "from pgqueuer_log where entrypoint = %s and status = 'successful'"


def finished(conn: psycopg.Connection[Any], name: str = NOOP) -> int:
    return int(scalar(conn, f"select count(*) {SUCCESSFUL}", (name,)))


def completion_span(conn: psycopg.Connection[Any], name: str = NOOP) -> tuple[float, float]:
    return time_span(conn, "created", SUCCESSFUL, (name,))


def io_name(body: str, variant: str) -> str:
    return f"bench_io_{body}"


def io_enqueue(body: str, variant: str, n: int, size: int) -> None:
    """Jobs for rows ``1..n`` (payload ``{"row": i}``) with the list form of ``SyncQueries.enqueue``."""
    conn, queries = sync_queries()
    name = io_name(body, variant)
    with conn:
        for start in range(1, n + 1, size):
            rows = range(start, min(start + size, n + 1))
            payloads = [json.dumps({"row": row}).encode() for row in rows]
            queries.enqueue([name] * len(payloads), payloads, [0] * len(payloads))


def subject() -> Subject:
    return module_subject(
        sys.modules[__name__],
        name="pgqueuer",
        version=version("pgqueuer"),
        database=DATABASE,
        notes="asyncpg worker, qm.run(batch_size=S) for S slots (S=10: qm.run() at its defaults), "
        "max_concurrent_tasks at its default (no cap); async no-op entrypoint; "
        "enqueue via SyncQueries(SyncPsycopgDriver), async row via Queries(AsyncpgDriver); "
        "io case (M in flight): qm.run(batch_size=M//2, max_concurrent_tasks=M) under uvloop as `pgq run` runs it, "
        "async bodies; orm body: asyncpg.create_pool() (asyncpg's defaults, 10 connections) shared through "
        "QueueManager(resources=...), pool.fetchrow(select) + pool.execute(update)",
        cases=("drain", "enqueue", "latency", "idle", "io"),
        worker_argv=peer_worker_argv(MODULE),
        probe_sender=ProbeSender,
        extra_enqueue={"enqueue_single_async": enqueue_single_async},
        io=IoSpec(variants=("async",), name=io_name, enqueue=io_enqueue, worker_argv=peer_io_argv(MODULE)),
    )


def stop_on_signals(qm: QueueManager) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, qm.shutdown.set)


def io_worker_main(in_flight: int, body: str) -> None:
    """One pgqueuer worker process running the io case's ``body`` with ``in_flight`` jobs at most, under
    uvloop as ``pgq run`` runs it."""
    import uvloop

    async def serve() -> None:
        conn = await asyncpg.connect(dsn(DATABASE))
        pool = await asyncpg.create_pool(dsn(DATABASE)) if body == "orm" else None  # asyncpg's defaults
        qm = QueueManager(Queries(AsyncpgDriver(conn)), resources={"pool": pool})

        if body == "sleep":

            @qm.entrypoint(io_name(body, "async"))
            async def bench_io_sleep(job: Job) -> None:
                await asyncio.sleep(IO_SLEEP_S)

        else:

            @qm.entrypoint(io_name(body, "async"))
            async def bench_io_orm(job: Job, ctx: Context) -> None:
                rows: Any = ctx.resources["pool"]
                key = json.loads(job.payload or b"{}")["row"]
                found = await rows.fetchrow(f"select id, value from {IO_TABLE} where id = $1", key)
                await asyncio.sleep(IO_SLEEP_S)
                await rows.execute(f"update {IO_TABLE} set value = $1 where id = $2", found["value"] + 1, key)

        stop_on_signals(qm)
        announce_ready()
        await qm.run(batch_size=max(1, in_flight // 2), max_concurrent_tasks=in_flight)
        if pool is not None:
            await pool.close()
        if not conn.is_closed():
            await conn.close()

    uvloop.run(serve())


def worker_main(slots: int, body: str) -> None:
    """One pgqueuer worker process: no-op and probe entrypoints (an io ``body``: :func:`io_worker_main`);
    SIGTERM sets the shutdown event."""
    if body != "noop":
        io_worker_main(slots, body)
        return

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

        stop_on_signals(qm)
        announce_ready()
        await qm.run(batch_size=slots)
        await side.close()
        if not conn.is_closed():
            await conn.close()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(peer_main(subject, worker_main))
