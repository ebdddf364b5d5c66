"""The demo's job backend, chosen by the database the demo runs on: the SQLite driver (and its outbox store
and event bus) on an SQLite ``DATABASE_URL`` — the default, a file under the project, no server — or the
Postgres driver on a PostgreSQL one (``make demo DATABASE_URL=postgres://…``)."""

from __future__ import annotations

from django.db import connection

from ultimate_jobs.clock import Clock
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.events.base import EventBus
from ultimate_jobs.outbox.store import OutboxStore

DemoDriver = PostgresDriver | SqliteDriver


def on_sqlite() -> bool:
    """Whether the demo's database is SQLite."""
    return connection.vendor == "sqlite"


def demo_driver(clock: Clock) -> DemoDriver:
    """The driver over the demo's database, every statement on ``clock``."""
    return SqliteDriver(clock=clock) if on_sqlite() else PostgresDriver(clock=clock)


def driver_title() -> str:
    """How the report names the backend."""
    return "SQLite driver (embedded, no server)" if on_sqlite() else "Postgres driver"


def demo_outbox_store(clock: Clock) -> OutboxStore:
    """The outbox store over the demo's database (stage joins the checkout's transaction either way)."""
    if on_sqlite():
        from ultimate_jobs.outbox.sqlite import sqlite_outbox_store

        return sqlite_outbox_store(clock=clock)
    from ultimate_jobs.outbox import postgres_outbox_store

    return postgres_outbox_store(clock=clock)


def demo_event_bus(driver: DemoDriver) -> EventBus:
    """The stored event bus over the driver's database: every process on it would see every event."""
    if isinstance(driver, SqliteDriver):
        from ultimate_jobs.events.sqlite import SqliteEventBus

        return SqliteEventBus(driver.executor)
    from ultimate_jobs import postgres_event_bus

    return postgres_event_bus(driver.executor)
