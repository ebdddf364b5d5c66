"""The driver every part of the demo runs on: Postgres, or Redis when ``ULTIMATE_JOBS["DRIVER"]`` is
``"redis"`` (``ULTIMATE_JOBS_DRIVER=redis make demo``). The demo's Redis keys live under their own
prefix, ``{demo}``, so a run clears them without touching another store on the same server."""

from __future__ import annotations

from typing import TypeAlias

from ultimate_jobs.clock import Clock
from ultimate_jobs.conf import jobs_settings
from ultimate_jobs.drivers.base import FINISHED_STATES, JobFilter, job_cursor
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.redis import RedisDriver

DemoDriver: TypeAlias = PostgresDriver | RedisDriver

DEMO_PREFIX = "demo"


def on_redis() -> bool:
    """Whether the settings name the Redis driver."""
    return jobs_settings().driver == "redis"


def demo_driver(clock: Clock) -> DemoDriver:
    """A driver over ``clock`` for one part of the demo."""
    if on_redis():
        return RedisDriver.from_url(jobs_settings().redis_url, clock=clock, prefix=DEMO_PREFIX)
    return PostgresDriver(clock=clock)


def clear_redis_store() -> None:
    """Delete every key of the demo's Redis store (its own prefix only)."""
    from ultimate_jobs.drivers.redis.driver import client_from_url

    client = client_from_url(jobs_settings().redis_url)
    try:
        keys = list(client.scan_iter(match="{" + DEMO_PREFIX + "}:*", count=1_000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


def finished_rows(driver: DemoDriver) -> int:
    """How many finished rows the store holds, read through the operator surface page by page."""
    introspect = driver.introspect
    total = 0
    for state in FINISHED_STATES:
        after: str | None = None
        while True:
            page = introspect.list(JobFilter(state=state, limit=200, after=after))
            total += len(page.rows)
            if page.is_last:
                break
            after = job_cursor(page.rows[-1])
    return total
