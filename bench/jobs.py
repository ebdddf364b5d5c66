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


@job(name="bench_probe", idempotency_key=lambda i: f"probe:{i['kind']}:{i['seq']}", tenant="none")
def bench_probe(run: JobRun[Any]) -> None:
    """Records its own start (wall clock, epoch seconds) under its ``kind`` and ``n``; the bench subtracts
    the time the probe's enqueue returned."""
    started = time.time()
    with connection.cursor() as cursor:
        cursor.execute(
            f"insert into {LATENCY_TABLE} (kind, n, started) values (%s, %s, %s)",
            [run.input["kind"], run.input["n"], started],
        )
