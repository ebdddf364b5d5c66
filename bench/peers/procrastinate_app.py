"""The Procrastinate app the peer bench defers to and runs (a module of its own, as Procrastinate asks:
an app defined in ``__main__`` would register its tasks under a second name)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from procrastinate import App, PsycopgConnector

from bench.common import LATENCY_TABLE, conninfo

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
