"""The io case's jobs for ultimate_jobs: bodies that wait ``IO_SLEEP_S`` (the stand-in for an HTTP call), and
the same with one ORM read and one ORM write of the job's own ``BenchRow``.

Imported under the io case's settings only (``bench.settings_io``: ``ULTIMATE_JOBS["MODULES"]``): by its
worker processes and by ``python -m bench.io_enqueue``, which loads a drain's jobs. Never by the bench process
or the other cases' workers, so their registries and queues stay as they were.
Each form has a queue of its own, which its worker alone serves: ``bench_io`` for the ``async def`` bodies,
``bench_io_sync`` for the plain ones. The steps case's two jobs (one ORM write of the job's own row, in a
``step.run`` or a ``step.atomic``) are on ``bench_steps``.

The ``async def`` bodies exist only where ultimate_jobs runs them: on a checkout whose ``@job`` still refuses
an async body (``X_JOB_ASYNC_UNSUPPORTED``), they are not declared and :data:`ASYNC_UNAVAILABLE` says why, so
the bench reports them NOT MEASURED.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.db.models import F

from bench.common import IO_SLEEP_S
from bench.models import BenchRow
from ultimate_jobs import JobRun, job
from ultimate_jobs.errors import UltimateError

ASYNC_QUEUE = "bench_io"
SYNC_QUEUE = "bench_io_sync"
STEPS_QUEUE = "bench_steps"


def _key(i: dict[str, Any]) -> str:
    return f"io:{i['row']}"


@job(name="bench_io_sleep_sync", queue=SYNC_QUEUE, idempotency_key=_key, tenant="none")
def bench_io_sleep_sync(run: JobRun[Any]) -> None:
    """Waits ``IO_SLEEP_S`` on its thread slot."""
    time.sleep(IO_SLEEP_S)


@job(name="bench_io_orm_sync", queue=SYNC_QUEUE, idempotency_key=_key, tenant="none")
def bench_io_orm_sync(run: JobRun[Any]) -> None:
    """Reads its row (``objects.get``), waits ``IO_SLEEP_S``, writes the row (``filter(...).update``)."""
    row = BenchRow.objects.get(pk=run.input["row"])
    time.sleep(IO_SLEEP_S)
    BenchRow.objects.filter(pk=row.pk).update(value=row.value + 1)


async def _sleep_async(run: JobRun[Any]) -> None:
    """Awaits ``IO_SLEEP_S``."""
    await asyncio.sleep(IO_SLEEP_S)


async def _orm_async(run: JobRun[Any]) -> None:
    """Reads its row (``await objects.aget``), awaits ``IO_SLEEP_S``, writes the row
    (``await filter(...).aupdate``): Django's async ORM."""
    row = await BenchRow.objects.aget(pk=run.input["row"])
    await asyncio.sleep(IO_SLEEP_S)
    await BenchRow.objects.filter(pk=row.pk).aupdate(value=row.value + 1)


def _declare_async() -> tuple[dict[str, Any], str | None]:
    """The async handles by body, or none and the reason this checkout refuses them."""
    try:
        return {
            "sleep": job(name="bench_io_sleep_async", queue=ASYNC_QUEUE, idempotency_key=_key, tenant="none")(
                _sleep_async
            ),
            "orm": job(name="bench_io_orm_async", queue=ASYNC_QUEUE, idempotency_key=_key, tenant="none")(_orm_async),
        }, None
    except UltimateError as exc:  # X_JOB_ASYNC_UNSUPPORTED until async bodies are built
        return {}, f"this checkout's @job refuses an async def body: {exc}"


def _write_row(run: JobRun[Any]) -> int:
    """The steps case's one write: its row's ``value`` plus one (a row written twice would read 2)."""
    return BenchRow.objects.filter(pk=run.input["row"]).update(value=F("value") + 1)


@job(name="bench_step_run", queue=STEPS_QUEUE, idempotency_key=_key, tenant="none")
def bench_step_run(run: JobRun[Any]) -> None:
    """One ``step.run`` whose function writes the job's own row (the write, then the checkpoint)."""
    run.step.run("write", lambda: _write_row(run))


@job(name="bench_step_atomic", queue=STEPS_QUEUE, idempotency_key=_key, tenant="none")
def bench_step_atomic(run: JobRun[Any]) -> None:
    """The same write as a transactional step: the write and the checkpoint in one transaction."""
    run.step.atomic("write", lambda: _write_row(run))


STEP_HANDLES: dict[str, Any] = {"run": bench_step_run, "atomic": bench_step_atomic}
SYNC_HANDLES: dict[str, Any] = {"sleep": bench_io_sleep_sync, "orm": bench_io_orm_sync}
ASYNC_HANDLES, ASYNC_UNAVAILABLE = _declare_async()
