"""The Redis driver's fleet leases, rate schedules, leader lease, scheduler watermarks and backfill ledger —
each mutation one script, each at the caller's instant, by the memory driver's rules."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from ...contracts.schedules import BackfillBegin, BackfillRun, BackfillStatus, Fire, FireResult, LeaderLease, RateState
from ...core.ids import new_id
from .rows import backfill_run, pairs, request_doc, text

if TYPE_CHECKING:
    from .driver import RedisDriver


class RedisLeaseStore:
    """Fleet slots per key: a sorted set in slot order and each holder's expiry, lapsed holders dropped
    by the script that reads them."""

    def __init__(self, driver: RedisDriver) -> None:
        self._d = driver

    def _run(self, op: str, key: str, holder: str = "", ttl_ms: int = 0, limit: int = 0) -> Any:
        now = self._d.clock.now_ms()
        return self._d.run("lease", op, key, holder, str(now), str(ttl_ms), str(limit))

    def acquire(self, key: str, holder: str, *, limit: int, ttl_ms: int) -> bool:
        return bool(self._run("acquire", key, holder, ttl_ms, limit))

    def renew(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        return bool(self._run("renew", key, holder, ttl_ms))

    def release(self, key: str, holder: str) -> None:
        self._run("release", key, holder)

    def holders(self, key: str) -> list[str]:
        return list(self._run("holders", key))


class RedisRateStore:
    """Rate schedules in two sorted sets (:mod:`.queries.rates`): a take is one script, running
    :func:`~ultimate_jobs.drivers.rates.decide`'s decision on the values it reads."""

    def __init__(self, driver: RedisDriver) -> None:
        self._d = driver

    def take(self, key: str, holder: str, *, interval_ms: int, now_ms: int, near_ms: int = 0) -> int:
        return int(self._d.run("rate_take", key, holder, str(interval_ms), str(now_ms), str(near_ms)))

    def state(self) -> list[RateState]:
        return [RateState(key, int(at), int(held)) for key, at, held in self._d.run("rate_state")]

    def forget(self, *, before_ms: int) -> int:
        return int(self._d.run("rate_forget", str(before_ms)))


class RedisLeaderStore:
    """Leader leases by name (the memory and Postgres stores' rules), the counter rollup riding on an
    acquire that landed."""

    durable = True

    def __init__(self, driver: RedisDriver) -> None:
        self._d = driver

    def acquire(self, name: str, holder: str, *, ttl_ms: int, now_ms: int, rollup: bool = False) -> LeaderLease | None:
        got = self._d.run("leader_acquire", name, holder, str(ttl_ms), str(now_ms), "1" if rollup else "0")
        if not got:
            return None
        if rollup:
            self._d.sample_queues(now_ms)
        held, acquired, expires = got
        return LeaderLease(name, held, int(acquired), int(expires))

    def release(self, name: str, holder: str) -> bool:
        return bool(self._d.run("leader_release", name, holder))

    def current(self, name: str) -> LeaderLease | None:
        with self._d.unavailable():
            row = text(self._d.client.hgetall(self._d.key("leader", name)))
        if not row:
            return None
        return LeaderLease(name, row["holder"], int(row["acquired"]), int(row["expires"]))


class RedisSchedulerStore:
    """Watermarks by task; a fire is one script: the fence, the rows and the record."""

    durable = True

    def __init__(self, driver: RedisDriver) -> None:
        self._d = driver

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        if not tasks:
            return {}
        marks = self._d.run("scheduler_load", str(now_ms), *tasks)
        return {task: int(mark) for task, mark in zip(tasks, marks, strict=True)}

    def fire(self, fire: Fire) -> FireResult:

        doc = {
            "task": fire.task,
            "previous": str(fire.previous_ms),
            "watermark": str(fire.watermark_ms),
            "occurrence": str(fire.occurrence_ms),
            "now": str(fire.now_ms),
            "requests": [request_doc(r) for r in fire.requests],
        }
        outcome, inserted = self._d.run("scheduler_fire", json.dumps(doc, separators=(",", ":")))
        if outcome == "fired":
            return FireResult("fired", int(inserted))
        return FireResult("paused" if outcome == "paused" else "fenced")


class RedisBackfillStore:
    """The backfill ledger: one hash per pass, found by run id, listed newest first."""

    def __init__(self, driver: RedisDriver) -> None:
        self._d = driver

    def begin(self, begin: BackfillBegin) -> BackfillRun:
        doc = {
            "name": begin.name,
            "tenant": begin.tenant_id,
            "checksum": begin.checksum,
            "app": begin.app_version,
            "job_id": begin.job_id,
            "run_id": begin.run_id,
            "now": str(begin.now_ms),
        }
        return backfill_run(pairs(self._d.run("backfill_begin", json.dumps(doc), new_id())))

    def progress(self, row_id: str, *, rows_processed: int, batches: int, last_cursor: Any, now_ms: int) -> bool:
        cursor = json.dumps(last_cursor)
        return bool(self._d.run("backfill_progress", row_id, str(rows_processed), str(batches), cursor, str(now_ms)))

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
        doc = {
            "id": row_id,
            "status": status,
            "rows": None if rows_processed is None else str(rows_processed),
            "batches": None if batches is None else str(batches),
            "err": error_code,
            "now": str(now_ms),
        }
        return bool(self._d.run("backfill_finish", json.dumps(doc)))

    def _all(self) -> builtins.list[BackfillRun]:
        """Every row, newest first (started, then id — both descending)."""
        with self._d.unavailable():
            ids = text(self._d.client.zrevrange(self._d.key("bf", "all"), 0, -1))
            pipe = self._d.client.pipeline(transaction=False)
            for row_id in ids:
                pipe.hgetall(self._d.key("bf", row_id))
            rows = text(pipe.execute())
        return [backfill_run(row) for row in rows if row]

    def completed(self, name: str, tenant_id: str | None) -> BackfillRun | None:
        for row in self._all():
            if row.name == name and row.tenant_id == tenant_id and row.status == "completed":
                return row
        return None

    def list(
        self, *, name: str | None = None, status: BackfillStatus | None = None, limit: int = 100
    ) -> builtins.list[BackfillRun]:
        rows = [r for r in self._all() if (name is None or r.name == name) and (status is None or r.status == status)]
        return rows[:limit]
