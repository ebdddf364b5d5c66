"""The Celery side of the Redis comparison: the Redis broker on ``BENCH_REDIS_URL``, no result backend
(``task_ignore_result``), and the two tasks (the same bodies as ours). Run by ``celery -A
bench.peers.celery_app worker --pool threads --concurrency S`` with gossip, mingle and heartbeats off."""

from __future__ import annotations

import os

from celery import Celery

from bench.redis_cases import mark_done, mark_probe

app = Celery("bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"))
app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)


@app.task(name="bench.noop")
def noop(n: int) -> None:
    mark_done()


@app.task(name="bench.probe")
def probe(n: int) -> None:
    mark_probe(n)
