"""The event bus ``step.wait_for_event`` reads and :func:`publish_event` writes."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..drivers.memory.events import MemoryEventBus
from ..drivers.postgres.events import PostgresEventBus, postgres_event_bus
from ..durations import Duration
from .base import DEFAULT_EVENT_TTL, EventBus, EventRecord
from .purge import EVENTS_PURGE_TARGET, EventsPurgeTarget, events_purge_target

__all__ = [
    "EVENTS_PURGE_TARGET",
    "EventBus",
    "EventRecord",
    "EventsPurgeTarget",
    "MemoryEventBus",
    "PostgresEventBus",
    "event_bus",
    "events_purge_target",
    "postgres_event_bus",
    "publish_event",
    "reset_event_bus",
    "set_event_bus",
]

_lock = threading.Lock()
_bus: EventBus | None = None


def event_bus() -> EventBus:
    """The installed bus. Until :func:`set_event_bus` installs one it is built from settings: on the
    Postgres driver, the Postgres bus over the driver's database (every process sees every event); on the
    SQLite driver, the SQLite bus over its database (likewise); otherwise a process-local memory bus."""
    global _bus
    with _lock:
        if _bus is None:
            _bus = _default_bus()
        return _bus


def _default_bus() -> EventBus:
    from ..installed import default_event_bus

    return default_event_bus()


def set_event_bus(bus: EventBus) -> None:
    """Install ``bus`` for every later publish and wait."""
    global _bus
    with _lock:
        _bus = bus


def reset_event_bus() -> None:
    """The test seam: forget every published event (an event stays matchable until it expires, so an
    answer one test published would otherwise resume the next test's wait)."""
    global _bus
    with _lock:
        _bus = None


def publish_event(
    event: str, data: Mapping[str, Any] | None = None, *, ttl: Duration = DEFAULT_EVENT_TTL
) -> EventRecord:
    """Publish ``event`` with ``data``; every wait whose ``match`` it satisfies resumes on its next poll.

    >>> publish_event("order.paid", {"order_id": "o-1"})
    """
    return event_bus().publish(event, dict(data or {}), ttl=ttl)
