"""The memory driver's scheduler storage: ``driver.leader`` and ``driver.scheduler_state`` in process
maps, under the driver's lock — the Postgres statements' rules, so the conformance suite answers alike.

For tests and ``jobs_dev``: nothing outlives the process (``durable = False``), but every scheduler over
one memory driver shares its lease and its watermarks, so failover and catch-up run in one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..base import Fire, FireResult, LeaderLease, TaskFire

if TYPE_CHECKING:
    from .driver import MemoryDriver


class MemoryLeaderStore:
    """Lease rows by name (``SQL_LEADER_ACQUIRE``'s rules)."""

    durable = False

    def __init__(self, driver: MemoryDriver) -> None:
        self._d = driver
        self._leases: dict[str, LeaderLease] = {}

    def acquire(self, name: str, holder: str, *, ttl_ms: int, now_ms: int, rollup: bool = False) -> LeaderLease | None:
        with self._d.lock:
            held = self._leases.get(name)
            live = held is not None and held.expires_at_ms > now_ms
            if held is not None and live and held.holder != holder:
                return None
            renewal = held is not None and live and held.holder == holder
            acquired = held.acquired_at_ms if renewal and held is not None else now_ms
            lease = self._leases[name] = LeaderLease(name, holder, acquired, now_ms + ttl_ms)
            if rollup:
                self._d.introspect.fold_counters(now_ms)
            return lease

    def release(self, name: str, holder: str) -> bool:
        with self._d.lock:
            held = self._leases.get(name)
            if held is None or held.holder != holder:
                return False
            del self._leases[name]
            return True

    def current(self, name: str) -> LeaderLease | None:
        with self._d.lock:
            return self._leases.get(name)


class MemorySchedulerStore:
    """Watermarks by task; a fire is ``SQL_SCHEDULER_FIRE``'s fence, insert and record under one lock."""

    durable = False

    def __init__(self, driver: MemoryDriver) -> None:
        self._d = driver
        self._watermarks: dict[str, int] = {}

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        with self._d.lock:
            for name in tasks:
                self._watermarks.setdefault(name, now_ms)
            return {name: self._watermarks[name] for name in tasks}

    def fire(self, fire: Fire) -> FireResult:
        introspect = self._d.introspect
        with self._d.lock:
            if fire.task in introspect.paused_task_set:
                return FireResult("paused")
            if self._watermarks.get(fire.task) != fire.previous_ms:
                return FireResult("fenced")
            deduping = [replace(r, on_conflict="dedupe") for r in fire.requests]  # as ON CONFLICT DO NOTHING
            answers, due = self._d.insert(deduping, fire.now_ms)
            self._watermarks[fire.task] = fire.watermark_ms
            introspect.fires[fire.task] = TaskFire(fire.task, fire.occurrence_ms, fire.now_ms)
        for queue in due:
            self._d.announce(queue)
        return FireResult("fired", sum(1 for a in answers if not a.deduped))
