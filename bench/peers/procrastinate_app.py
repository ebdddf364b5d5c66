"""The Procrastinate app the peer bench defers to and runs (a module of its own, as Procrastinate asks:
an app defined in ``__main__`` would register its tasks under a second name)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from procrastinate import App, JobContext, PsycopgConnector

from bench.common import IO_SLEEP_S, IO_TABLE, LATENCY_TABLE, conninfo

DATABASE = "bench_procrastinate"

app = App(connector=PsycopgConnector(conninfo=conninfo(DATABASE)))
side: dict[str, psycopg.AsyncConnection[Any]] = {}  # the worker's connection for probe writes


@app.task(name="bench_noop")
async def bench_noop() -> None:
    return None


@app.task(name="bench_probe")
async def bench_probe(kind: str, n: int) -> None:
    started = time.time()
    await side["conn"].execute(
        f"insert into {LATENCY_TABLE} (kind, n, started) values (%s, %s, %s)", (kind, n, started)
    )


# -- the io case's tasks (bench/peers/procrastinate_bench.py runs them at the io case's concurrency) --------


@app.task(name="bench_io_sleep")
async def bench_io_sleep(row: int) -> None:
    await asyncio.sleep(IO_SLEEP_S)


@app.task(name="bench_io_orm", pass_context=True)
async def bench_io_orm(context: JobContext, row: int) -> None:
    """Reads its row, waits, writes it: through the psycopg pool the worker hands over in
    ``additional_context`` (Procrastinate's documented way to share a resource with tasks)."""
    pool = context.additional_context["pool"]
    async with pool.connection() as conn:
        cursor = await conn.execute(f"select id, value from {IO_TABLE} where id = %s", (row,))
        found = await cursor.fetchone()
    await asyncio.sleep(IO_SLEEP_S)
    async with pool.connection() as conn:
        await conn.execute(f"update {IO_TABLE} set value = %s where id = %s", (found[1] + 1, row))


IO_TASKS = {"sleep": bench_io_sleep, "orm": bench_io_orm}
