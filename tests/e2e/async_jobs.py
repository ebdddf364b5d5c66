"""The jobs the async worker process tests run in real worker processes (``ULTIMATE_JOBS['MODULES']`` of
:mod:`tests.e2e.async_settings`), all on one queue. Every run leaves rows in ``e2e_effects`` (the table of
:mod:`tests.e2e.pg_jobs`), written through ``sync_to_async`` — the way an async body reaches the ORM.

- ``async_hold`` (3 attempts): the first run of a job writes ``running:<job id>`` and then awaits
  ``asyncio.sleep`` — ``HOLD_MAX_S`` at most — holding its async slot until its task is cancelled (a
  drain, a lost lease) or the time passes. A later run of the same job writes ``again:<job id>`` and
  returns at once.
- ``async_touch``: one ``SELECT 1`` through the async path, then return (the 10,000-job drain).
- ``async_record`` / ``sync_record``: write ``async:<key>`` from inside the event loop, or ``sync:<key>``
  from a thread with no loop — one queue, both kinds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from tests.e2e.pg_jobs import ran_before, record
from ultimate_jobs import JobRun, job

QUEUE = "e2e-async"
HOLD_MAX_S = 60.0


def _select_one() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": 3})
async def async_hold(run: JobRun[Any]) -> dict[str, Any]:
    if await sync_to_async(ran_before)(run.job_id):
        await sync_to_async(record)(f"again:{run.job_id}", run.attempt)
        return {"attempt": run.attempt}
    await sync_to_async(record)(f"running:{run.job_id}", run.attempt)
    await asyncio.sleep(HOLD_MAX_S)
    return {"attempt": run.attempt, "held": HOLD_MAX_S}


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE)
async def async_touch(run: JobRun[Any]) -> None:
    await sync_to_async(_select_one)()


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE)
async def async_record(run: JobRun[Any]) -> None:
    asyncio.get_running_loop()  # raises off the loop
    await asyncio.sleep(0.01)
    await sync_to_async(record)(f"async:{run.input['key']}", run.attempt)


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE)
def sync_record(run: JobRun[Any]) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        record(f"sync:{run.input['key']}", run.attempt)
        return
    raise AssertionError("a sync body ran on the event loop")
