"""The jobs the Redis process tests run in real worker processes. Every run appends
``{"key", "pid", "attempt"}`` to the list ``effects`` on ``UJ_EFFECTS_URL`` — the suite's Redis database,
which holds the queue too unless a test runs the queue on a server of its own (one it restarts: the
record of what ran outlives the restart).

- ``record_effect``: one effect under the input's key, then return.
- ``hold_retry`` (3 attempts) / ``hold_once`` (1 attempt): the first run writes ``running:<job id>``
  and holds its slot until its signal is aborted (then raises) or ``HOLD_MAX_S`` passes; a later run
  writes ``again:<job id>`` and returns.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

from ultimate_jobs import JobRun, job

QUEUE = "e2e-redis"
HOLD_MAX_S = 20.0
EFFECTS = "effects"

_client: redis.Redis | None = None


def effects_client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["UJ_EFFECTS_URL"], decode_responses=True)
    return _client


def record(key: str, attempt: int) -> None:
    effects_client().rpush(EFFECTS, json.dumps({"key": key, "pid": os.getpid(), "attempt": attempt, "at": time.time()}))


def ran_before(job_id: str) -> bool:
    return any(json.loads(e)["key"] == f"running:{job_id}" for e in effects_client().lrange(EFFECTS, 0, -1))


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
