"""The event bus protocol: one clock, publish, find-after, purge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.durations import Duration

DEFAULT_EVENT_TTL = "7d"


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A published event, stamped with the bus's own clock."""

    id: str
    event: str
    data: Mapping[str, Any]
    published_at_ms: int
    expires_at_ms: int


class EventBus(Protocol):
    """Where events live. The bus has ONE clock: ``now()`` stamps publishes and starts waits."""

    def now(self) -> int:
        """The bus clock in epoch ms (the database's ``now()`` on Postgres)."""

    def publish(self, event: str, data: Mapping[str, Any], *, ttl: Duration = DEFAULT_EVENT_TTL) -> EventRecord:
        """Store an event, matchable until it expires."""

    def find(self, event: str, match: Mapping[str, Any] | None, *, since_ms: int) -> EventRecord | None:
        """The oldest unexpired ``event`` published at or after ``since_ms`` whose data contains ``match``."""

    def purge_expired(self) -> int:
        """Delete expired events; answers how many."""


def matches(data: Mapping[str, Any], match: Mapping[str, Any] | None) -> bool:
    """Containment: every key of ``match`` is in ``data`` with an equal value (nested dicts recurse)."""
    if not match:
        return True
    for key, want in match.items():
        if key not in data:
            return False
        have = data[key]
        if isinstance(want, Mapping) and isinstance(have, Mapping):
            if not matches(have, want):
                return False
        elif have != want:
            return False
    return True
