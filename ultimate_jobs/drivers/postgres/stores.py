"""The Postgres driver's stores: ``driver.leases`` (fleet slots), ``driver.leader`` and
``driver.scheduler_state`` (the scheduler's lease, watermarks and one-statement fire) and
``driver.backfills`` (the ledger), over the shared :mod:`..sql.stores` and the statements of
:mod:`.queries` — a fire's job rows land in the same statement as its watermark, and the leader's rollup in
the same statement as its renewal."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import IntegrityError, transaction

from ...contracts.schedules import Fire, FireResult, LeaderLease
from ...core.clock import SystemClock
from ..sql.rows import LeaseRow, leader_lease
from ..sql.stores import SqlBackfillStore, SqlLeaseStore, SqlRateStore, SqlSchedulerStore
from .executor import jsonb
from .queries import backfills, jobs, scheduler
from .rows import POSTGRES, enqueue_rows


class PostgresRateStore(SqlRateStore):
    """Rate schedules: a take is one statement (SQL_RATE_TAKE); takers of one key queue on its row, and on wall
    time (a :class:`~ultimate_jobs.core.clock.SystemClock`) the instant is decided once that row's lock is held
    — never before ``now_ms`` plus the wait for it — answered from ``now_ms``."""

    sql = jobs

    def take(self, key: str, holder: str, *, interval_ms: int, now_ms: int, near_ms: int = 0) -> int:
        params = {
            "key": key,
            "holder": holder,
            "interval": interval_ms,
            "now": now_ms,
            "near": near_ms,
            "lagged": isinstance(self._d.clock, SystemClock),  # a frozen clock's now_ms does not move with the wait
        }
        return int(self._d.executor.query(jobs.SQL_RATE_TAKE, params, binding="prepared")[0][0])

    def forget(self, *, before_ms: int) -> int:
        return int(self._query(jobs.SQL_RATE_FORGET, {"before": before_ms})[0][0])


class PostgresLeaseStore(SqlLeaseStore):
    """Fleet slots in ``x_job_leases``: acquirers of one key serialise on a transaction advisory lock."""

    sql = jobs

    def acquire(self, key: str, holder: str, *, limit: int, ttl_ms: int) -> bool:
        params = {"key": key, "holder": holder, "limit": limit, "ttl": ttl_ms, "now": self._d.clock.now_ms()}
        try:
            with transaction.atomic(using=self._d.alias):
                self._query(jobs.SQL_LEASE_LOCK, params)
                return bool(self._query(jobs.SQL_LEASE_ACQUIRE, params)[0][0])
        except IntegrityError:  # another transaction inserted this very holder between the lock and us
            return False

    def renew(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        params = {"key": key, "holder": holder, "ttl": ttl_ms, "now": self._d.clock.now_ms()}
        return bool(self._query(jobs.SQL_LEASE_RENEW, params))


class PostgresSchedulerStore(SqlSchedulerStore):
    """``driver.leader`` and ``driver.scheduler_state``. The leader's lease is a row with an expiry, not
    ``pg_try_advisory_lock`` — an advisory lock belongs to a session, and the driver's statements run on
    pooled connections, so the lock would go with the connection and every node would read itself as
    leader. Arming and the fire are one statement each."""

    sql = scheduler

    def acquire(self, name: str, holder: str, *, ttl_ms: int, now_ms: int, rollup: bool = False) -> LeaderLease | None:
        params = {"name": name, "holder": holder, "now": now_ms, "ttl": ttl_ms}
        rows = self._query(scheduler.SQL_LEADER_ACQUIRE_ROLLUP if rollup else scheduler.SQL_LEADER_ACQUIRE, params)
        return leader_lease(LeaseRow._make(rows[0][:4]), POSTGRES) if rows else None

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        names = list(dict.fromkeys(tasks))
        if not names:
            return {}
        rows = self._query(scheduler.SQL_SCHEDULER_LOAD, {"tasks": names, "now": now_ms})
        found = {task: int(at) for task, at, *_ in rows}
        missing = [name for name in names if name not in found]
        if missing:  # armed by another scheduler after this statement's snapshot was taken
            again = self._query(scheduler.SQL_SCHEDULER_WATERMARKS, {"tasks": missing})
            found.update({task: int(at) for task, at, *_ in again})
        return {name: found[name] for name in tasks}

    def fire(self, fire: Fire) -> FireResult:
        params = {
            "task": fire.task,
            "previous": fire.previous_ms,
            "watermark": fire.watermark_ms,
            "occurrence": fire.occurrence_ms,
            "now": fire.now_ms,
            "rows": jsonb(enqueue_rows(fire.requests, self._d.fair_queues)),
        }
        [(moved, paused, inserted, _)] = self._query(scheduler.SQL_SCHEDULER_FIRE, params)
        if moved:
            return FireResult("fired", int(inserted))
        return FireResult("paused" if paused else "fenced")


class PostgresBackfillStore(SqlBackfillStore):
    """``driver.backfills`` over the ``SQL_BACKFILL_*`` statements."""

    sql = backfills
