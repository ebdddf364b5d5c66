"""Redis tests run against the real server on 127.0.0.1:6379, in a database number of their own
(``ULTIMATE_JOBS_TEST_REDIS_DB``, default 5, plus the pytest-xdist worker's index), flushed before each test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from tests.helpers import redis_test_db

REDIS_HOST = os.environ.get("ULTIMATE_JOBS_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("ULTIMATE_JOBS_TEST_REDIS_PORT", "6379"))
REDIS_DB = redis_test_db()
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/redis/" in str(item.fspath):
            item.add_marker(pytest.mark.redis)


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """A client on the test database, flushed before the test."""
    from ultimate_jobs.drivers.redis.driver import client_from_url

    client = client_from_url(REDIS_URL)
    client.flushdb()
    try:
        yield client
    finally:
        client.close()
