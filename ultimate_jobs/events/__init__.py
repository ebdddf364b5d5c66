"""The event bus ``step.wait_for_event`` reads and :func:`publish_event` writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..contracts.events import DEFAULT_EVENT_TTL, EventBus, EventRecord
from ..core.durations import Duration
from ..core.installed import event_bus, reset_event_bus, set_event_bus
from ..drivers.memory.events import MemoryEventBus
from ..drivers.postgres.events import PostgresEventBus, postgres_event_bus

__all__ = [
    "EventBus",
    "EventRecord",
    "MemoryEventBus",
    "PostgresEventBus",
    "event_bus",
    "postgres_event_bus",
    "publish_event",
    "reset_event_bus",
    "set_event_bus",
]


def publish_event(
    event: str, data: Mapping[str, Any] | None = None, *, ttl: Duration = DEFAULT_EVENT_TTL
) -> EventRecord:
    """Publish ``event`` with ``data``; every wait whose ``match`` it satisfies resumes on its next poll.

    >>> publish_event("order.paid", {"order_id": "o-1"})
    """
    return event_bus().publish(event, dict(data or {}), ttl=ttl)
