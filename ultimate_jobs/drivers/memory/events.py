"""An in-process event bus for tests and ``jobs_dev``."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from typing import Any

from ...contracts.events import DEFAULT_EVENT_TTL, EventRecord, matches
from ...core.clock import Clock
from ...core.durations import Duration, parse_duration
from ...core.installed import job_clock


class MemoryEventBus:
    """Events in a list, stamped with ``clock`` — or, when none is given, the clock installed with
    ``set_job_clock`` at each read, so the bus ``event_bus()`` rebuilds after ``reset_event_bus()``
    keeps the frozen clock a test installed instead of jumping to wall time."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock
        self._events: list[EventRecord] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def now(self) -> int:
        return (self._clock or job_clock()).now_ms()

    def publish(self, event: str, data: Mapping[str, Any], *, ttl: Duration = DEFAULT_EVENT_TTL) -> EventRecord:
        now = self.now()
        record = EventRecord(f"evt-{next(self._ids)}", event, dict(data), now, now + parse_duration(ttl, field="ttl"))
        with self._lock:
            self._events.append(record)
        return record

    def find(self, event: str, match: Mapping[str, Any] | None, *, since_ms: int) -> EventRecord | None:
        now = self.now()
        with self._lock:
            for record in self._events:
                if (
                    record.event == event
                    and record.published_at_ms >= since_ms
                    and record.expires_at_ms > now
                    and matches(record.data, match)
                ):
                    return record
        return None

    def purge_expired(self) -> int:
        now = self.now()
        with self._lock:
            before = len(self._events)
            self._events = [e for e in self._events if e.expires_at_ms > now]
            return before - len(self._events)
