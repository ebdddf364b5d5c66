"""The dramatiq side of the Redis comparison: a ``RedisBroker`` on ``BENCH_REDIS_URL`` and the two actors
(the same bodies as ours). Run by ``dramatiq bench.peers.dramatiq_app --processes 1 --threads S``."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.redis_cases import mark_done, mark_probe

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench", max_retries=0)
def noop(n: int) -> None:
    mark_done()


@dramatiq.actor(queue_name="bench", max_retries=0)
def probe(n: int) -> None:
    mark_probe(n)
