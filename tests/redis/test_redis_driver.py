"""The Redis driver: the whole conformance suite, the same test bodies as every other driver."""

from __future__ import annotations

import pytest
import redis

from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.testing.conformance import DriverConformance, DriverFactory


class TestRedisDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self, redis_client: redis.Redis) -> DriverFactory:
        return lambda clock: RedisDriver(redis_client, clock=clock)
