"""Redis tests run against the real server on 127.0.0.1:6379, in the database this test process leases
for its lifetime (:mod:`tests.redis_db`: no other process, of this run or another, uses it), flushed
before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.redis_db import redis_test_url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/redis/" in str(item.fspath):
            item.add_marker(pytest.mark.redis)


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """A client on the test database, flushed before the test."""
    from ultimate_jobs.drivers.redis.driver import client_from_url

    client = client_from_url(redis_test_url())
    client.flushdb()
    try:
        yield client
    finally:
        client.close()
