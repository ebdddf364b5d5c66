"""The jobs the SQLite process tests run in real worker processes (``ULTIMATE_JOBS['MODULES']`` of
:mod:`tests.sqlite.process_settings`). Every run leaves a row in ``e2e_effects(job_key, worker_pid,
attempt, at)``, a table the test creates in the same SQLite file, so the test reads which process ran
what, and how often.

- ``record_effect``: one row under the input's key, then return.
- ``hold_retry`` (3 attempts) / ``hold_once`` (1 attempt): the first run of a job writes
  ``running:<job id>`` and holds its slot — waking every 50 ms on its signal — until the signal is
  aborted (then it raises) or ``HOLD_MAX_S`` passes. A later run of the same job writes
  ``again:<job id>`` and returns at once.
- ``exits`` (2 attempts, 200 ms apart): writes ``exiting:<job id>``, then calls ``sys.exit(3)``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from django.db import connection

from ultimate_jobs import JobRun, job

QUEUE = "e2e-lite"
HOLD_MAX_S = 20.0

EFFECTS_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS e2e_effects (job_key text NOT NULL, worker_pid int NOT NULL, attempt int, at real)"
)


def record(job_key: str, attempt: int) -> None:
    """One effect row, committed at once (the job thread's connection is in autocommit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO e2e_effects (job_key, worker_pid, attempt, at) VALUES (%s, %s, %s, %s)",
            [job_key, os.getpid(), attempt, time.time()],
        )


def ran_before(job_id: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM e2e_effects WHERE job_key = %s", [f"running:{job_id}"])
        return cursor.fetchone() is not None


@job(name="lite_record_effect", idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE)
def record_effect(run: JobRun[Any]) -> None:
    record(run.input["key"], run.attempt)


def hold(run: JobRun[Any]) -> dict[str, Any]:
    if ran_before(run.job_id):
        record(f"again:{run.job_id}", run.attempt)
        return {"attempt": run.attempt}
    record(f"running:{run.job_id}", run.attempt)
    deadline = time.monotonic() + HOLD_MAX_S
    while not run.signal.wait(0.05):
        if time.monotonic() >= deadline:
            return {"attempt": run.attempt, "held": HOLD_MAX_S}
    raise RuntimeError(f"hold: the signal was aborted ({run.signal.reason!r})")


@job(name="lite_hold_retry", idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": 3})
def hold_retry(run: JobRun[Any]) -> dict[str, Any]:
    return hold(run)


@job(name="lite_hold_once", idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": 1})
def hold_once(run: JobRun[Any]) -> dict[str, Any]:
    return hold(run)


@job(
    name="lite_exits",
    idempotency_key=lambda i: i["key"],
    tenant="none",
    queue=QUEUE,
    retry={"attempts": 2, "backoff": "fixed", "delay": "200ms", "jitter": False},
)
def exits(run: JobRun[Any]) -> None:
    """Writes ``exiting:<job id>`` for each attempt, then calls ``sys.exit(3)`` (a library that ends the
    process on a bad config)."""
    record(f"exiting:{run.job_id}", run.attempt)
    sys.exit(3)
