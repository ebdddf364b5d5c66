"""The Redis driver: the whole conformance suite, the same test bodies as every other driver."""

from __future__ import annotations

import pytest
import redis

from ultimate_jobs.contracts.protocol import JobDriver
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.testing.conformance import DriverConformance, DriverFactory, StateWriter


class TestRedisDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self, redis_client: redis.Redis) -> DriverFactory:
        return lambda clock: RedisDriver(redis_client, clock=clock)

    @pytest.fixture
    def write_state(self, redis_client: redis.Redis) -> StateWriter:
        def write(driver: JobDriver, job_id: str, state: str) -> None:
            assert isinstance(driver, RedisDriver)
            redis_client.hset(driver.key("job", job_id), "state", state)

        return write
