"""The SQLite driver's stores: ``driver.leases`` (fleet slots), ``driver.rates`` (rate schedules), ``driver.leader`` and
``driver.scheduler_state`` (the scheduler's lease, watermarks and fires) and ``driver.backfills`` (the
ledger), over the statements of :mod:`.queries`. An operation of several statements
runs in one ``BEGIN IMMEDIATE`` transaction: a fire's job rows land with its watermark, a leader's rollup
with its renewal."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...contracts.schedules import Fire, FireResult, LeaderLease
from ..rates import decide
from ..sql.rows import LeaseRow, leader_lease
from ..sql.stores import SqlBackfillStore, SqlLeaseStore, SqlRateStore, SqlSchedulerStore
from .queries import jobs as sql
from .queries import stores as sql_stores
from .rows import SQLITE, dumps, ms, ts

if TYPE_CHECKING:
    from .driver import SqliteDriver


class SqliteRateStore(SqlRateStore):
    """Rate schedules: a take reads the holder's reservation and the key's next free instant and writes
    :func:`~ultimate_jobs.drivers.rates.decide`'s answer, in one ``BEGIN IMMEDIATE`` transaction — decided
    at the driver's clock once the write lock is held (never before the caller's ``now_ms``), answered from
    the caller's ``now_ms``."""

    sql = sql

    def take(self, key: str, holder: str, *, interval_ms: int, now_ms: int, near_ms: int = 0) -> int:
        q = self._d.executor.query
        mine = {"key": key, "holder": holder}
        with self._d.executor.write():
            # decided when the write lock is held, which may have been waited for behind other writers: an
            # instant before then would start late, closer to the next one than the interval
            lag_ms: int = max(0, self._d.clock.now_ms() - now_ms)
            held = q(sql.SQL_RATE_HELD, mine)
            scheduled = q(sql.SQL_RATE_NEXT, {"key": key})
            taken = decide(
                held[0][0] if held else None,
                scheduled[0][0] if scheduled else None,
                interval_ms=interval_ms,
                now_ms=now_ms + lag_ms,
                near_ms=near_ms - lag_ms,  # still near of the caller's now_ms, which the answer counts from
            )
            if taken.next_at_ms is not None:
                q(sql.SQL_RATE_MOVE, {"key": key, "next_at_ms": taken.next_at_ms})
            if taken.hold_at_ms is not None:
                q(sql.SQL_RATE_HOLD, {**mine, "at_ms": taken.hold_at_ms})
            elif held:
                q(sql.SQL_RATE_SPEND, mine)
        return taken.wait_ms + lag_ms

    def forget(self, *, before_ms: int) -> int:
        with self._d.executor.write():
            schedules = self._d.executor.query(sql.SQL_RATE_FORGET_SCHEDULES, {"before": before_ms})
            holds = self._d.executor.query(sql.SQL_RATE_FORGET_HOLDS, {"before": before_ms})
        return len(schedules) + len(holds)


class SqliteLeaseStore(SqlLeaseStore):
    """Fleet slots in ``x_job_leases``: SQLite's write lock serialises acquirers of every key."""

    sql = sql

    def acquire(self, key: str, holder: str, *, limit: int, ttl_ms: int) -> bool:
        now = self._d.clock.now_ms()
        params = {"key": key, "holder": holder, "now": ts(now), "expires": ts(now + ttl_ms)}
        q = self._d.executor.query
        with self._d.executor.write():
            q(sql.SQL_LEASE_PURGE, {k: params[k] for k in ("key", "holder", "now")})
            if q(sql.SQL_LEASE_RENEW, params):
                return True
            [(others,)] = q(sql.SQL_LEASE_OTHERS, {k: params[k] for k in ("key", "holder", "now")})
            if others >= limit:
                return False
            q(sql.SQL_LEASE_TAKE, params)
            return True

    def renew(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        now = self._d.clock.now_ms()
        params = {"key": key, "holder": holder, "now": ts(now), "expires": ts(now + ttl_ms)}
        return bool(self._d.executor.query(sql.SQL_LEASE_RENEW, params))


class SqliteSchedulerStore(SqlSchedulerStore):
    """``driver.leader`` and ``driver.scheduler_state``. SQLite's one write lock serialises lease acquirers,
    so one wins; the leader's rollup runs in its acquire's transaction, a fire's job rows in its watermark's."""

    sql = sql_stores

    def acquire(self, name: str, holder: str, *, ttl_ms: int, now_ms: int, rollup: bool = False) -> LeaderLease | None:
        params = {"name": name, "holder": holder, "now": ts(now_ms), "expires": ts(now_ms + ttl_ms)}
        with self._d.executor.write():
            rows = self._d.executor.query(sql_stores.SQL_LEADER_ACQUIRE, params)
            if rows and rollup:
                self._d.rollup_at(now_ms)
        return leader_lease(LeaseRow._make(rows[0]), SQLITE) if rows else None

    _d: SqliteDriver

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        names = list(dict.fromkeys(tasks))
        if not names:
            return {}
        with self._d.executor.write():
            self._d.executor.query(sql_stores.SQL_SCHEDULER_ARM, {"tasks": dumps(names), "now": ts(now_ms)})
            rows = self._d.executor.query(sql_stores.SQL_SCHEDULER_WATERMARKS, {"tasks": dumps(names)})
        found = {task: ms(at) for task, at in rows}
        return {name: found[name] for name in tasks}

    def fire(self, fire: Fire) -> FireResult:
        d = self._d
        params = {
            "task": fire.task,
            "previous": ts(fire.previous_ms),
            "watermark": ts(fire.watermark_ms),
            "now": ts(fire.now_ms),
        }
        requests = [dataclasses.replace(r, on_conflict="dedupe") for r in fire.requests]
        rows = [d._row(r, fire.now_ms) for r in requests]
        with d.executor.write():
            if not d.executor.query(sql_stores.SQL_SCHEDULER_MOVE, params):
                paused = bool(d.executor.query(sql_stores.SQL_TASK_PAUSED, {"task": fire.task}))
                return FireResult("paused" if paused else "fenced")
            answers = d.insert_rows(rows, requests, fire.now_ms) if rows else []
            d.executor.query(
                sql_stores.SQL_SCHEDULER_RECORD_FIRE,
                {"task": fire.task, "occurrence": ts(fire.occurrence_ms), "now": ts(fire.now_ms)},
            )
        inserted = [row for row, a in zip(rows, answers, strict=True) if not a.deduped]
        d.announce([row["queue"] for row in inserted if row["_due"]])
        return FireResult("fired", len(inserted))


class SqliteBackfillStore(SqlBackfillStore):
    """``driver.backfills`` over the ``SQL_BACKFILL_*`` statements."""

    sql = sql_stores
