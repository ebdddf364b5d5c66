"""The SQLite driver's stores: ``driver.leases`` (fleet slots), ``driver.leader`` and
``driver.scheduler_state`` (the scheduler's lease, watermarks and fires) and ``driver.backfills`` (the
ledger), over the statements of :mod:`.queries`. An operation of several statements
runs in one ``BEGIN IMMEDIATE`` transaction: a fire's job rows land with its watermark, a leader's rollup
with its renewal."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from ...ids import new_id
from ..base import BackfillBegin, BackfillRun, BackfillStatus, Fire, FireResult, LeaderLease
from .queries import jobs as sql
from .queries import stores as sql_stores
from .rows import dashed, dashed_or_none, dumps, hex_id, loads, ms, ms_or_none, ts

if TYPE_CHECKING:
    from .driver import SqliteDriver


class SqliteLeaseStore:
    """Fleet slots in ``x_job_leases``: SQLite's write lock serialises acquirers of every key."""

    def __init__(self, driver: SqliteDriver) -> None:
        self._d = driver

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

    def release(self, key: str, holder: str) -> None:
        self._d.executor.query(sql.SQL_LEASE_RELEASE, {"key": key, "holder": holder})

    def holders(self, key: str) -> list[str]:
        rows = self._d.executor.query(sql.SQL_LEASE_HOLDERS, {"key": key, "now": ts(self._d.clock.now_ms())})
        return [r[0] for r in rows]


class SqliteLeaderStore:
    """``driver.leader``: a lease is a row with an expiry in ``x_job_scheduler_leases``."""

    durable = True

    def __init__(self, driver: SqliteDriver) -> None:
        self._d = driver

    def acquire(self, name: str, holder: str, *, ttl_ms: int, now_ms: int, rollup: bool = False) -> LeaderLease | None:
        params = {"name": name, "holder": holder, "now": ts(now_ms), "expires": ts(now_ms + ttl_ms)}
        with self._d.executor.write():
            rows = self._d.executor.query(sql_stores.SQL_LEADER_ACQUIRE, params)
            if rows and rollup:
                self._d.introspect.rollup_at(now_ms)
        return _lease(rows[0]) if rows else None

    def release(self, name: str, holder: str) -> bool:
        return bool(self._d.executor.query(sql_stores.SQL_LEADER_RELEASE, {"name": name, "holder": holder}))

    def current(self, name: str) -> LeaderLease | None:
        rows = self._d.executor.query(sql_stores.SQL_LEADER_CURRENT, {"name": name})
        return _lease(rows[0]) if rows else None


def _lease(row: Sequence[Any]) -> LeaderLease:
    name, holder, acquired, expires = row[:4]
    return LeaderLease(name=name, holder=holder, acquired_at_ms=ms(acquired), expires_at_ms=ms(expires))


class SqliteSchedulerStore:
    """``driver.scheduler_state``: the watermarks outlive the process, so a redeployed scheduler reads where
    the one it replaced stopped and catch-up sees the gap."""

    durable = True

    def __init__(self, driver: SqliteDriver) -> None:
        self._d = driver

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        names = list(dict.fromkeys(tasks))
        if not names:
            return {}
        with self._d.executor.write():
            self._d.executor.query(sql_stores.SQL_SCHEDULER_ARM, {"tasks": dumps(names), "now": ts(now_ms)})
            rows = self._d.executor.query(sql_stores.SQL_SCHEDULER_WATERMARKS, {"tasks": dumps(names)})
        found = {row[0]: ms(row[1]) for row in rows}
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


class SqliteBackfillStore:
    """``driver.backfills``: the ``x_backfills`` ledger outlives every process, so a pass killed mid-sweep is
    still ``running`` on its row until a retry adopts it."""

    def __init__(self, driver: SqliteDriver) -> None:
        self._d = driver

    def begin(self, begin: BackfillBegin) -> BackfillRun:
        params = {
            "id": hex_id(new_id()),
            "name": begin.name,
            "tenant_id": begin.tenant_id,
            "checksum": begin.checksum,
            "app_version": begin.app_version,
            "job_id": hex_id(begin.job_id) or begin.job_id,
            "run_id": hex_id(begin.run_id) or begin.run_id,
            "now": ts(begin.now_ms),
        }
        return _run(self._d.executor.query(sql_stores.SQL_BACKFILL_BEGIN, params)[0])

    def progress(self, row_id: str, *, rows_processed: int, batches: int, last_cursor: Any, now_ms: int) -> bool:
        params = {
            "id": hex_id(row_id),
            "rows": rows_processed,
            "batches": batches,
            "cursor": dumps(last_cursor),
            "now": ts(now_ms),
        }
        return bool(self._d.executor.query(sql_stores.SQL_BACKFILL_PROGRESS, params))

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
        params = {
            "id": hex_id(row_id),
            "status": status,
            "rows": rows_processed,
            "batches": batches,
            "error_code": error_code,
            "now": ts(now_ms),
        }
        return bool(self._d.executor.query(sql_stores.SQL_BACKFILL_FINISH, params))

    def completed(self, name: str, tenant_id: str | None) -> BackfillRun | None:
        rows = self._d.executor.query(sql_stores.SQL_BACKFILL_COMPLETED, {"name": name, "tenant_id": tenant_id})
        return _run(rows[0]) if rows else None

    def list(
        self, *, name: str | None = None, status: BackfillStatus | None = None, limit: int = 100
    ) -> builtins.list[BackfillRun]:
        rows = self._d.executor.query(sql_stores.SQL_BACKFILL_LIST, {"name": name, "status": status, "limit": limit})
        return [_run(row) for row in rows]


def _run(row: Sequence[Any]) -> BackfillRun:
    (id_, name, tenant, checksum, status, version, rows, batches, cursor, job, run, code, started, updated,
     completed) = row  # fmt: skip
    return BackfillRun(
        id=dashed(id_),
        name=name,
        tenant_id=tenant,
        checksum=checksum,
        status=status,
        app_version=version,
        rows_processed=int(rows),
        batches=int(batches),
        last_cursor=loads(cursor),
        job_id=dashed_or_none(job) or "",
        run_id=dashed_or_none(run) or "",
        error_code=code,
        started_at_ms=ms(started),
        updated_at_ms=ms(updated),
        completed_at_ms=ms_or_none(completed),
    )
