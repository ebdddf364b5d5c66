"""The SQLite event bus: events in ``x_job_events`` on the jobs database, so every process on the file sees
every event. Stamped and expired by the host's clock — on SQLite every process shares one host."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from ...contracts.events import DEFAULT_EVENT_TTL, EventRecord, matches
from ...core.clock import Clock, system_clock
from ...core.durations import Duration
from ..sql.events import checked_publish, purge_in_batches
from .executor import SqliteExecutor
from .queries.events import SQL_EVENT_CANDIDATES, SQL_EVENT_PUBLISH, SQL_EVENT_PURGE
from .rows import dashed, loads, ms, ts

FIND_PAGE = 100
"""Events a find reads per statement while it looks for one whose data contains the match."""


class SqliteEventBus:
    """The bus over ``x_job_events`` on an SQLite alias. Build it with :func:`sqlite_event_bus`."""

    def __init__(self, executor: SqliteExecutor, clock: Clock | None = None) -> None:
        self.executor = executor
        self.clock = clock or system_clock()

    def now(self) -> int:
        return self.clock.now_ms()

    def publish(self, event: str, data: Mapping[str, Any], *, ttl: Duration = DEFAULT_EVENT_TTL) -> EventRecord:
        body, encoded, ttl_ms = checked_publish(event, data, ttl)
        now = self.now()
        event_id = uuid.uuid4()
        params = {
            "id": event_id.hex,
            "event": event,
            "data": encoded,
            "published": ts(now),
            "expires": ts(now + ttl_ms),
        }
        self.executor.query(SQL_EVENT_PUBLISH, params)
        return EventRecord(str(event_id), event, body, now, now + ttl_ms)

    def find(self, event: str, match: Mapping[str, Any] | None, *, since_ms: int) -> EventRecord | None:
        after_at, after_id = "", ""
        params = {"event": event, "since": ts(since_ms), "now": ts(self.now()), "limit": FIND_PAGE}
        while True:
            rows = self.executor.query(SQL_EVENT_CANDIDATES, {**params, "after_at": after_at, "after_id": after_id})
            for event_id, name, data, published, expires in rows:
                body = loads(data)
                if matches(body, match):
                    return EventRecord(dashed(event_id), name, body, ms(published), ms(expires))
            if len(rows) < FIND_PAGE:
                return None
            after_at, after_id = ts(ms(rows[-1][3])), rows[-1][0]

    def purge_expired(self) -> int:
        """Delete expired events a bounded batch per statement (:data:`~..base.PURGE_BATCH`), until a batch
        comes back short; answers how many went."""
        return purge_in_batches(
            lambda limit: len(self.executor.query(SQL_EVENT_PURGE, {"now": ts(self.now()), "limit": limit}))
        )


def sqlite_event_bus(alias: str = "default") -> SqliteEventBus:
    """The event bus every process on one SQLite jobs database shares (a process on the sqlite driver gets
    it by default).

    >>> set_event_bus(sqlite_event_bus("default"))
    >>> publish_event("order.paid", {"order_id": "o-1"})
    """
    return SqliteEventBus(SqliteExecutor(alias))
