"""The jobs the bench measures: a no-op, a probe whose body records its own pickup latency, a
backfill over ``bench_rows`` and an export of it."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from django.db import connection

from bench.common import LATENCY_TABLE
from bench.models import BenchRow
from ultimate_jobs import JobRun, backfill, export_rows, job


@job(name="bench_noop", idempotency_key=lambda i: f"noop:{i['n']}", tenant="none")
def bench_noop(run: JobRun[Any]) -> None:
    """Does nothing: what is measured is the queue."""
    return None


@job(name="bench_probe", idempotency_key=lambda i: f"probe:{i['kind']}:{i['seq']}", tenant="none")
def bench_probe(run: JobRun[Any]) -> None:
    """Records its own start (wall clock, epoch seconds) under its ``kind`` and ``n``; the bench subtracts
    the time the probe's enqueue returned."""
    record_probe_start(run)


def record_probe_start(run: JobRun[Any]) -> None:
    """A probe body: the wall clock now (epoch seconds) into the latency table under the input's ``kind`` and
    ``n`` (the fairness case's probe, ``bench/fair_jobs.py``, runs it too)."""
    started = time.time()
    with connection.cursor() as cursor:
        cursor.execute(
            f"insert into {LATENCY_TABLE} (kind, n, started) values (%s, %s, %s)",
            [run.input["kind"], run.input["n"], started],
        )


def _touch(rows: list[BenchRow], signal: Any) -> None:
    """The page's UPDATE — literally the statement the bench's hand-written keyset loop runs."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE bench_rows SET value = 1 WHERE id = ANY(%s)", [[row.pk for row in rows]])


def _touch_pks(pks: list[int], signal: Any) -> None:
    """The same UPDATE over a ``values_list("pk", flat=True)`` page: the ids themselves, no instances."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE bench_rows SET value = 1 WHERE id = ANY(%s)", [pks])


bench_backfill_pks = backfill(
    name="bench_backfill_pks",
    tenant="none",
    batch=1_000,
    rate=200,
    source=lambda ctx: BenchRow.objects.values_list("pk", flat=True),
    handle=_touch_pks,
)

bench_backfill = backfill(
    name="bench_backfill",
    tenant="none",
    batch=1_000,
    rate=200,
    source=lambda ctx: BenchRow.objects.all(),
    handle=_touch,
)


EXPORT_DIR_ENV = "BENCH_EXPORT_DIR"
"""Where ``bench_export`` writes (the bench sets it for its worker; a temp folder otherwise)."""


def export_storage() -> Any:
    from django.core.files.storage import FileSystemStorage

    return FileSystemStorage(location=os.environ.get(EXPORT_DIR_ENV) or tempfile.gettempdir())


bench_export = export_rows(
    name="bench_export",
    tenant="none",
    prefix=lambda i: f"bench-export/{i['run']}",
    source=lambda run: BenchRow.objects.all(),
    columns=["id", "value"],
    row=lambda r: {"id": r.pk, "value": r.value},
    sink=export_storage,
    batch=5_000,
)
