"""The Postgres event bus: events in ``x_job_events``, stamped and expired by the database's clock.

One clock for every process: a worker running a minute ahead of the database still matches an
event published after its wait began, because the wait's "asked at" came from the same
``bus.now()`` the publish was stamped with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...contracts.events import DEFAULT_EVENT_TTL, EventRecord
from ...core.durations import Duration
from ..sql.events import checked_publish, purge_in_batches
from .executor import Executor, from_jsonb, jsonb
from .queries.events import SQL_EVENT_FIND, SQL_EVENT_NOW, SQL_EVENT_PUBLISH, SQL_EVENT_PURGE


class PostgresEventBus:
    """The bus over ``x_job_events``. Build it with :func:`postgres_event_bus`. It takes no clock."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def now(self) -> int:
        [(now,)] = self.executor.query(SQL_EVENT_NOW)
        return int(now)

    def publish(self, event: str, data: Mapping[str, Any], *, ttl: Duration = DEFAULT_EVENT_TTL) -> EventRecord:
        body, encoded, ttl_ms = checked_publish(event, data, ttl)
        params = {"event": event, "data": encoded, "ttl": ttl_ms}
        [(event_id, published, expires)] = self.executor.query(SQL_EVENT_PUBLISH, params)
        return EventRecord(str(event_id), event, body, int(published), int(expires))

    def find(self, event: str, match: Mapping[str, Any] | None, *, since_ms: int) -> EventRecord | None:
        params = {"event": event, "since": since_ms, "match": jsonb(dict(match or {}))}
        rows = self.executor.query(SQL_EVENT_FIND, params)
        if not rows:
            return None
        event_id, name, data, published, expires = rows[0]
        return EventRecord(str(event_id), name, from_jsonb(data), int(published), int(expires))

    def purge_expired(self) -> int:
        """Delete expired events a bounded batch per statement (:data:`~..base.PURGE_BATCH`), until a batch
        comes back short; answers how many went."""
        return purge_in_batches(lambda limit: int(self.executor.query(SQL_EVENT_PURGE, {"limit": limit})[0][0]))


def postgres_event_bus(executor: Executor) -> PostgresEventBus:
    """The event bus every process of a Postgres deployment shares; install it with ``set_event_bus``
    (a process on the Postgres driver gets it by default).

    >>> from ultimate_jobs.drivers.postgres.executor import django_executor
    >>> set_event_bus(postgres_event_bus(django_executor("default")))
    >>> publish_event("order.paid", {"order_id": "o-1"})
    """
    return PostgresEventBus(executor)
