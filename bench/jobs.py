"""The jobs the bench measures: a no-op, and a probe whose body records its own pickup latency."""

from __future__ import annotations

import time
from typing import Any

from django.db import connection

from bench.common import LATENCY_TABLE
from ultimate_jobs import JobRun, job


@job(name="bench_noop", idempotency_key=lambda i: f"noop:{i['n']}", tenant="none")
def bench_noop(run: JobRun[Any]) -> None:
    """Does nothing: what is measured is the queue."""
    return None


@job(name="bench_probe", idempotency_key=lambda i: f"probe:{i['kind']}:{i['n']}", tenant="none")
def bench_probe(run: JobRun[Any]) -> None:
    """Writes ``now - input['t']`` (the enqueuer's wall clock just before its enqueue call), in ms."""
    latency_ms = (time.time() - run.input["t"]) * 1000.0
    with connection.cursor() as cursor:
        cursor.execute(
            f"insert into {LATENCY_TABLE} (kind, latency_ms) values (%s, %s)", [run.input["kind"], latency_ms]
        )
