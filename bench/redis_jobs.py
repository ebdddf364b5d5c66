"""The Redis comparison's jobs for ultimate_jobs — the same bodies the dramatiq and Celery scripts run:
a no-op that counts itself (``INCR bench:done``) and a probe that stamps its start (``HSET bench:lat``)."""

from __future__ import annotations

from typing import Any

from ultimate_jobs import JobRun, job

from .redis_cases import mark_done, mark_probe

QUEUE = "bench-redis"


@job(name="bench_redis_noop", idempotency_key=lambda i: f"noop:{i['n']}", tenant="none", queue=QUEUE)
def bench_redis_noop(run: JobRun[Any]) -> None:
    mark_done()


@job(name="bench_redis_probe", idempotency_key=lambda i: f"probe:{i['n']}", tenant="none", queue=QUEUE)
def bench_redis_probe(run: JobRun[Any]) -> None:
    mark_probe(run.input["n"])
