"""The memory driver's stores: ``driver.leases`` (fleet slots), ``driver.leader`` and
``driver.scheduler_state`` (the scheduler's lease, watermarks and fire) and ``driver.backfills`` (the
ledger), in process maps — the rules of the Postgres statements (``postgres.queries``), so the
conformance suite answers alike.

For tests and ``jobs_dev``: nothing outlives the process (``durable = False``), but every scheduler over
one memory driver shares its lease and its watermarks, so failover and catch-up run in one process.
"""

from __future__ import annotations

import builtins
import copy
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from ...contracts.schedules import (
    BackfillBegin,
    BackfillRun,
    BackfillStatus,
    Fire,
    FireResult,
    LeaderLease,
    RateState,
    TaskFire,
)
from ...core.clock import Clock
from ...core.ids import new_id
from ..rates import decide

if TYPE_CHECKING:
    from .driver import MemoryDriver


class MemoryLeaseStore:
    """Fleet slots in one heap: ``key -> [(holder, expires_at_ms)]`` in slot order."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: dict[str, list[tuple[str, int]]] = {}

    def _live(self, key: str) -> list[tuple[str, int]]:
        now = self._clock.now_ms()
        slots = [(h, exp) for h, exp in self._slots.get(key, []) if exp > now]
        if slots:
            self._slots[key] = slots
        else:
            self._slots.pop(key, None)
        return slots

    def acquire(self, key: str, holder: str, *, limit: int, ttl_ms: int) -> bool:
        with self._lock:
            slots = self._live(key)
            expires = self._clock.now_ms() + ttl_ms
            for i, (h, _) in enumerate(slots):
                if h == holder:
                    slots[i] = (holder, expires)
                    return True
            if len(slots) >= limit:
                return False
            self._slots[key] = [*slots, (holder, expires)]
            return True

    def renew(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        with self._lock:
            slots = self._live(key)
            for i, (h, _) in enumerate(slots):
                if h == holder:
                    slots[i] = (holder, self._clock.now_ms() + ttl_ms)
                    return True
            return False

    def release(self, key: str, holder: str) -> None:
        with self._lock:
            slots = [(h, exp) for h, exp in self._live(key) if h != holder]
            if slots:
                self._slots[key] = slots
            else:
                self._slots.pop(key, None)

    def holders(self, key: str) -> list[str]:
        with self._lock:
            return [h for h, _ in self._live(key)]


class MemoryRateStore:
    """Rate schedules in two maps: ``key -> next free instant`` and ``key -> {holder: reserved instant}``
    (the decision is :func:`~ultimate_jobs.drivers.rates.decide`'s, as every driver's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}
        self._held: dict[str, dict[str, int]] = {}

    def take(self, key: str, holder: str, *, interval_ms: int, now_ms: int, near_ms: int = 0) -> int:
        with self._lock:
            held = self._held.setdefault(key, {})
            taken = decide(
                held.get(holder), self._next.get(key), interval_ms=interval_ms, now_ms=now_ms, near_ms=near_ms
            )
            if taken.next_at_ms is not None:
                self._next[key] = taken.next_at_ms
            if taken.hold_at_ms is None:
                held.pop(holder, None)
            else:
                held[holder] = taken.hold_at_ms
            return taken.wait_ms

    def state(self) -> list[RateState]:
        with self._lock:
            return [
                RateState(key=key, next_at_ms=at, reserved=len(self._held.get(key, {})))
                for key, at in sorted(self._next.items())
            ]

    def forget(self, *, before_ms: int) -> int:
        with self._lock:
            gone = [key for key, at in self._next.items() if at < before_ms]
            for key in gone:
                del self._next[key]
            dropped = len(gone)
            for held in self._held.values():
                stale = [holder for holder, at in held.items() if at < before_ms]
                for holder in stale:
                    del held[holder]
                dropped += len(stale)
            return dropped


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
                self._d.rollup_at(now_ms)
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
        operator_store = self._d.operator
        with self._d.lock:
            if fire.task in operator_store.paused_task_set:
                return FireResult("paused")
            if self._watermarks.get(fire.task) != fire.previous_ms:
                return FireResult("fenced")
            deduping = [replace(r, on_conflict="dedupe") for r in fire.requests]  # as ON CONFLICT DO NOTHING
            answers, due = self._d.insert(deduping, fire.now_ms)
            self._watermarks[fire.task] = fire.watermark_ms
            operator_store.fires[fire.task] = TaskFire(fire.task, fire.occurrence_ms, fire.now_ms)
        for queue in due:
            self._d.announce(queue)
        return FireResult("fired", sum(1 for a in answers if not a.deduped))


class MemoryBackfillStore:
    """``x_backfills`` rows by id; the run's row is found by ``run_id`` (unique, as in the table)."""

    def __init__(self, driver: MemoryDriver) -> None:
        self._d = driver
        self._rows: dict[str, BackfillRun] = {}

    def begin(self, begin: BackfillBegin) -> BackfillRun:
        with self._d.lock:
            for row in self._rows.values():
                if row.run_id == begin.run_id:
                    adopted = replace(
                        row, status="running", app_version=begin.app_version,
                        error_code=None, completed_at_ms=None, updated_at_ms=begin.now_ms,
                    )  # fmt: skip
                    self._rows[row.id] = adopted
                    return adopted
            row = BackfillRun(
                id=new_id(),
                name=begin.name,
                tenant_id=begin.tenant_id,
                checksum=begin.checksum,
                status="running",
                app_version=begin.app_version,
                rows_processed=0,
                batches=0,
                last_cursor=None,
                job_id=begin.job_id,
                run_id=begin.run_id,
                error_code=None,
                started_at_ms=begin.now_ms,
                updated_at_ms=begin.now_ms,
                completed_at_ms=None,
            )
            self._rows[row.id] = row
            return row

    def progress(self, row_id: str, *, rows_processed: int, batches: int, last_cursor: Any, now_ms: int) -> bool:
        with self._d.lock:
            row = self._rows.get(row_id)
            if row is None or row.status != "running":
                return False
            self._rows[row_id] = replace(
                row, rows_processed=rows_processed, batches=batches, last_cursor=copy.deepcopy(last_cursor),
                updated_at_ms=now_ms,
            )  # fmt: skip
            return True

    def finish(
        self,
        row_id: str,
        *,
        status: Literal["completed", "failed"],
        rows_processed: int | None = None,
        batches: int | None = None,
        error_code: str | None = None,
        now_ms: int,
    ) -> bool:
        with self._d.lock:
            row = self._rows.get(row_id)
            if row is None:
                return False
            self._rows[row_id] = replace(
                row,
                status=status,
                rows_processed=row.rows_processed if rows_processed is None else rows_processed,
                batches=row.batches if batches is None else batches,
                error_code=error_code if status == "failed" else None,
                updated_at_ms=now_ms,
                completed_at_ms=now_ms if status == "completed" else None,
            )
            return True

    def completed(self, name: str, tenant_id: str | None) -> BackfillRun | None:
        with self._d.lock:
            done = [
                r
                for r in self._rows.values()
                if r.name == name and r.tenant_id == tenant_id and r.status == "completed"
            ]
            return self._newest_first(done)[0] if done else None

    def list(
        self, *, name: str | None = None, status: BackfillStatus | None = None, limit: int = 100
    ) -> builtins.list[BackfillRun]:
        with self._d.lock:
            rows = [
                r
                for r in self._rows.values()
                if (name is None or r.name == name) and (status is None or r.status == status)
            ]
            return self._newest_first(rows)[:limit]

    def _newest_first(self, rows: builtins.list[BackfillRun]) -> builtins.list[BackfillRun]:
        # SQL_BACKFILL_LIST's order: started_at desc, then id desc (ids are time-ordered uuid7s)
        return sorted(rows, key=lambda r: (r.started_at_ms, r.id), reverse=True)
