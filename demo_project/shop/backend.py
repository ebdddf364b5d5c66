"""The demo's job backend. The database the demo runs on picks the driver — the SQLite driver (and its
outbox store and event bus) on an SQLite ``DATABASE_URL``, the default, a file under the project and no
server; the Postgres driver on a PostgreSQL one (``make demo DATABASE_URL=postgres://…``) — unless the
settings name the Redis driver (``ULTIMATE_JOBS_DRIVER=redis make demo``): then the jobs live in Redis,
under the demo's own key prefix ``{demo}`` so a run clears them without touching another store on the
same server, while the outbox and the events stay in the database."""

from __future__ import annotations

from typing import TypeAlias

from django.db import connection

from ultimate_jobs.conf import jobs_settings
from ultimate_jobs.contracts.events import EventBus
from ultimate_jobs.contracts.jobs import FINISHED_STATES
from ultimate_jobs.contracts.operator import JobFilter
from ultimate_jobs.contracts.ordering import job_cursor
from ultimate_jobs.contracts.outbox import OutboxStore
from ultimate_jobs.core.clock import Clock
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver

DemoDriver: TypeAlias = PostgresDriver | SqliteDriver | RedisDriver

DEMO_PREFIX = "demo"


def on_sqlite() -> bool:
    """Whether the demo's database is SQLite."""
    return connection.vendor == "sqlite"


def on_redis() -> bool:
    """Whether the settings name the Redis driver."""
    return jobs_settings().driver == "redis"


def demo_driver(clock: Clock) -> DemoDriver:
    """The driver for one part of the demo, every statement on ``clock``, serving the settings' fair queues."""
    config = jobs_settings()
    if on_redis():
        return RedisDriver.from_url(config.redis_url, clock=clock, prefix=DEMO_PREFIX, fair_queues=config.fair_queues)
    if on_sqlite():
        return SqliteDriver(clock=clock, fair_queues=config.fair_queues)
    return PostgresDriver(clock=clock, fair_queues=config.fair_queues)


def driver_title() -> str:
    """How the report names the backend."""
    if on_redis():
        return "Redis driver"
    return "SQLite driver (embedded, no server)" if on_sqlite() else "Postgres driver"


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
    operator_store = driver.operator
    total = 0
    for state in FINISHED_STATES:
        after: str | None = None
        while True:
            page = operator_store.list(JobFilter(state=state, limit=200, after=after))
            total += len(page.rows)
            if page.is_last:
                break
            after = job_cursor(page.rows[-1])
    return total


def demo_outbox_store(clock: Clock) -> OutboxStore:
    """The outbox store over the demo's database (stage joins the checkout's transaction either way)."""
    if on_sqlite():
        from ultimate_jobs.drivers.sqlite.outbox import sqlite_outbox_store

        return sqlite_outbox_store(clock=clock)
    from ultimate_jobs.outbox import postgres_outbox_store

    return postgres_outbox_store(clock=clock)


def demo_event_bus(driver: DemoDriver) -> EventBus:
    """The stored event bus over the demo's database (on the Redis driver too: events live in the
    database), so every process on it would see every event."""
    if on_sqlite():
        from ultimate_jobs.drivers.sqlite.events import SqliteEventBus
        from ultimate_jobs.drivers.sqlite.executor import SqliteExecutor

        return SqliteEventBus(driver.executor if isinstance(driver, SqliteDriver) else SqliteExecutor())
    from ultimate_jobs import postgres_event_bus
    from ultimate_jobs.drivers.postgres.executor import django_executor

    return postgres_event_bus(driver.executor if isinstance(driver, PostgresDriver) else django_executor())
