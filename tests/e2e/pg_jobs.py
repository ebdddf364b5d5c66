"""The jobs the Postgres process tests run in real worker processes (``ULTIMATE_JOBS['MODULES']`` of
:mod:`tests.e2e.pg_settings`). Every run leaves rows in ``e2e_effects(job_key, worker_pid, attempt, at)``,
a table the test creates, so the test reads which process ran what, and how often.

- ``record_effect``: one row under the input's key, then return.
- ``hold_retry`` (3 attempts) / ``hold_once`` (1 attempt): the first run of a job writes
  ``running:<job id>`` and then holds its slot — waking every 50 ms on its signal — until the signal
  is aborted (then it raises) or ``HOLD_MAX_S`` passes. A later run of the same job (a re-claim after
  a SIGKILL, a pick-up after a drain) writes ``again:<job id>`` and returns at once.
- ``work_through`` (3 attempts): writes ``running:<job id>``, then works ``WORK_S`` without ever reading
  its signal (as most bodies do), then returns — a drain must wait for it, not hand it back.
- ``atomic_effect`` (3 attempts): one transactional step (``run.step.atomic``) that writes
  ``atomic:<key>`` in the step's transaction and appends a line to the input's ``ran`` file (outside any
  transaction: a count of the function's runs). On attempt 1 the input's ``kill`` kills the worker
  (SIGKILL, itself) inside that transaction: ``"after-write"`` right after the effect's row,
  ``"after-checkpoint"`` right after the step's checkpoint row landed (a fault hook on the slot's
  connection, :func:`kill_after_the_checkpoint`) — the moment before the commit.
- ``rate_limited`` (``rate_limit="10/s"``, one key for the fleet): writes ``rate:<n>`` stamped with the
  process's own clock (the one its rate take read) the moment its body starts.
- ``org_capped`` (the input's org as tenant; ``LIMITS["FLEET_PER_TENANT"]`` from ``UJ_FLEET_PER_TENANT``):
  writes ``cap:<org>:<n>:start``, works ``CAPPED_WORK_S``, then ``cap:<org>:<n>:end``.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import nullcontext
from typing import Any

from django.db import connection

from ultimate_jobs import JobRun, job
from ultimate_jobs.drivers.postgres.queries.jobs import SQL_SAVE_STEP_HELD

QUEUE = "e2e-pg"
HOLD_MAX_S = 20.0
WORK_S = 4.0

EFFECTS_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS e2e_effects (
    job_key text NOT NULL, worker_pid int NOT NULL, attempt int, at timestamptz NOT NULL DEFAULT now()
)
"""


def record(job_key: str, attempt: int) -> None:
    """One effect row, committed at once (the job thread's connection is in autocommit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO e2e_effects (job_key, worker_pid, attempt, at) VALUES (%s, %s, %s, now())",
            [job_key, os.getpid(), attempt],
        )


def ran_before(job_id: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM e2e_effects WHERE job_key = %s)", [f"running:{job_id}"])
        row = cursor.fetchone()
    return bool(row and row[0])


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE)
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


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": 3})
def hold_retry(run: JobRun[Any]) -> dict[str, Any]:
    return hold(run)


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": 1})
def hold_once(run: JobRun[Any]) -> dict[str, Any]:
    return hold(run)


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": 3})
def work_through(run: JobRun[Any]) -> dict[str, Any]:
    record(f"running:{run.job_id}", run.attempt)
    time.sleep(WORK_S)  # the signal is never read: a drain waits for the body to return
    return {"attempt": run.attempt}


@job(idempotency_key=lambda i: i["key"], tenant="none", queue=QUEUE, retry={"attempts": 3})
def atomic_effect(run: JobRun[Any]) -> int:
    key, kill = run.input["key"], run.input.get("kill") if run.attempt == 1 else None

    def write() -> int:
        with open(run.input["ran"], "a") as ran:  # outside the transaction: every run of the function counts
            ran.write(f"{os.getpid()} {run.attempt}\n")
        record(f"atomic:{key}", run.attempt)  # the step's transaction (the slot's connection, in atomic())
        if kill == "after-write":
            os.kill(os.getpid(), signal.SIGKILL)
        return run.attempt

    with connection.execute_wrapper(kill_after_the_checkpoint) if kill == "after-checkpoint" else nullcontext():
        return int(run.step.atomic("write", write))


def kill_after_the_checkpoint(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    """A fault hook (Django's ``execute_wrapper``, so every statement of the slot's connection passes it):
    run the statement, and SIGKILL this worker once the transactional step's checkpoint write has run —
    inside the step's transaction, before its commit."""
    answer = execute(sql, params, many, context)
    if sql == SQL_SAVE_STEP_HELD:
        os.kill(os.getpid(), signal.SIGKILL)
    return answer


RATE_LIMIT = "10/s"
CAPPED_WORK_S = 0.3


def stamp(job_key: str, attempt: int) -> None:
    """One effect row stamped with this process's clock (not the database's), committed at once."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO e2e_effects (job_key, worker_pid, attempt, at) VALUES (%s, %s, %s, to_timestamp(%s))",
            [job_key, os.getpid(), attempt, time.time()],
        )


@job(idempotency_key=lambda i: f"rate:{i['n']}", tenant="none", queue=QUEUE, rate_limit=RATE_LIMIT)
def rate_limited(run: JobRun[Any]) -> None:
    stamp(f"rate:{run.input['n']}", run.attempt)


@job(idempotency_key=lambda i: f"cap:{i['org']}:{i['n']}", tenant=lambda i: i["org"], queue=QUEUE)
def org_capped(run: JobRun[Any]) -> None:
    org, n = run.input["org"], run.input["n"]
    stamp(f"cap:{org}:{n}:start", run.attempt)
    time.sleep(CAPPED_WORK_S)
    stamp(f"cap:{org}:{n}:end", run.attempt)
