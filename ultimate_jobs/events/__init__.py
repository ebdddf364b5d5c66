"""The event bus ``step.wait_for_event`` reads and :func:`publish_event` writes."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..durations import Duration
from .base import DEFAULT_EVENT_TTL, EventBus, EventRecord
from .memory import MemoryEventBus

__all__ = [
    "EventBus",
    "EventRecord",
    "MemoryEventBus",
    "event_bus",
    "publish_event",
    "reset_event_bus",
    "set_event_bus",
]

_lock = threading.Lock()
_bus: EventBus | None = None


def event_bus() -> EventBus:
    """The installed bus; a process-local memory bus until :func:`set_event_bus` installs another."""
    global _bus
    with _lock:
        if _bus is None:
            _bus = MemoryEventBus()
        return _bus


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
