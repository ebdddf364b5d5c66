"""The stored event bus as a ``purge()`` target: ``x_job_events`` only shrinks when something calls it."""

from __future__ import annotations

from dataclasses import dataclass

from .base import EventBus

EVENTS_PURGE_TARGET = "x_job_events"


@dataclass(frozen=True, slots=True)
class EventsPurgeTarget:
    """``{name, purge_expired}`` over a bus: the shape every purge target has (structural)."""

    bus: EventBus
    name: str = EVENTS_PURGE_TARGET

    def purge_expired(self, now_ms: int | None = None) -> int:
        """Delete the bus's expired events; answers the rows removed. ``now_ms`` is ignored: the bus
        judges expiry on its own clock (the database's, on Postgres)."""
        return self.bus.purge_expired()


def events_purge_target(bus: EventBus) -> EventsPurgeTarget:
    """The bus as a purge target: ``targets=lambda: [events_purge_target(event_bus())]``.

    >>> events_purge_target(event_bus()).purge_expired()
    0
    """
    return EventsPurgeTarget(bus)
