"""``aenqueue``/``aenqueue_many`` on the Redis driver: tests/postgres/test_async_enqueue.py's bodies over an
``any_jobs`` that is the Redis driver on this run's test database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.conftest import AnyJobsEnv, installed
from tests.postgres.test_async_enqueue import (
    executor_connections_closed,
    test_aenqueue_does_not_block_the_event_loop,
    test_aenqueue_many_writes_one_row_per_input_in_order_or_none,
    test_aenqueue_refuses_what_enqueue_refuses_with_the_same_codes,
    test_aenqueue_writes_the_row_enqueue_would_and_run_jobs_drains_it,
    test_an_async_body_aenqueues_for_its_own_org_and_is_refused_for_another,
)
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.testing import FrozenClock

__all__ = [
    "executor_connections_closed",
    "test_aenqueue_does_not_block_the_event_loop",
    "test_aenqueue_many_writes_one_row_per_input_in_order_or_none",
    "test_aenqueue_refuses_what_enqueue_refuses_with_the_same_codes",
    "test_aenqueue_writes_the_row_enqueue_would_and_run_jobs_drains_it",
    "test_an_async_body_aenqueues_for_its_own_org_and_is_refused_for_another",
]


@pytest.fixture
def any_jobs(redis_client: redis.Redis) -> Iterator[AnyJobsEnv]:
    clock = FrozenClock()
    with installed(clock, RedisDriver(redis_client, clock=clock)) as env:  # type: ignore[type-var]
        yield env  # type: ignore[misc]
