"""The stores both SQL drivers share, over the driver's executor, dialect and catalogue: fleet slots
(``driver.leases``), the scheduler's lease and watermarks (``driver.leader``, ``driver.scheduler_state``)
and the backfill ledger (``driver.backfills``). Each backend's ``stores`` module adds what its algorithm
decides differently (an acquire, a load, a fire)."""

from __future__ import annotations

import builtins
from types import ModuleType
from typing import Any, Literal

from ...contracts.schedules import BackfillBegin, BackfillRun, BackfillStatus, LeaderLease, RateState
from ...core.ids import new_id
from .dialect import dumps
from .rows import BackfillRow, LeaseRow, backfill_run, leader_lease


class SqlStore:
    """A store over a driver: ``driver.executor``, ``driver.dialect``, ``driver.clock``; ``sql`` names the
    catalogue module its statements come from."""

    sql: ModuleType

    def __init__(self, driver: Any) -> None:
        self._d = driver

    def _query(self, statement: str, params: dict[str, Any]) -> builtins.list[tuple[Any, ...]]:
        return self._d.executor.query(statement, params)  # type: ignore[no-any-return]


class SqlRateStore(SqlStore):
    """Rate schedules in ``x_job_rates`` and reservations in ``x_job_rate_holds`` (the ``SQL_RATE_*``
    statements); a backend writes :meth:`take` and :meth:`forget`."""

    def state(self) -> builtins.list[RateState]:
        return [
            RateState(key=key, next_at_ms=int(at), reserved=int(n))
            for key, at, n in self._query(self.sql.SQL_RATE_STATE, {})
        ]


class SqlLeaseStore(SqlStore):
    """Fleet slots in ``x_job_leases`` (the ``SQL_LEASE_*`` statements)."""

    def release(self, key: str, holder: str) -> None:
        self._query(self.sql.SQL_LEASE_RELEASE, {"key": key, "holder": holder})

    def holders(self, key: str) -> builtins.list[str]:
        rows = self._query(self.sql.SQL_LEASE_HOLDERS, {"key": key, "now": self._d.dialect.at(self._d.clock.now_ms())})
        return [r[0] for r in rows]


class SqlSchedulerStore(SqlStore):
    """``driver.leader`` and ``driver.scheduler_state``, one store: the leader's lease is a row with an
    expiry in ``x_job_scheduler_leases``; the watermarks outlive the process, so a redeployed scheduler reads
    where the one it replaced stopped and catch-up sees the gap."""

    durable = True

    def release(self, name: str, holder: str) -> bool:
        return bool(self._query(self.sql.SQL_LEADER_RELEASE, {"name": name, "holder": holder}))

    def current(self, name: str) -> LeaderLease | None:
        rows = self._query(self.sql.SQL_LEADER_CURRENT, {"name": name})
        return leader_lease(LeaseRow._make(rows[0]), self._d.dialect) if rows else None


class SqlBackfillStore(SqlStore):
    """``driver.backfills``: the ``x_backfills`` ledger outlives every process, so a pass killed mid-sweep
    is still ``running`` on its row until a retry adopts it."""

    def _run(self, row: tuple[Any, ...]) -> BackfillRun:
        return backfill_run(BackfillRow._make(row), self._d.dialect)

    def begin(self, begin: BackfillBegin) -> BackfillRun:
        d = self._d.dialect
        params = {
            "id": d.uid_param(new_id()),
            "name": begin.name,
            "tenant_id": begin.tenant_id,
            "checksum": begin.checksum,
            "app_version": begin.app_version,
            "job_id": d.uid_param(begin.job_id) or begin.job_id,
            "run_id": d.uid_param(begin.run_id) or begin.run_id,
            "now": d.at(begin.now_ms),
        }
        return self._run(self._query(self.sql.SQL_BACKFILL_BEGIN, params)[0])

    def progress(self, row_id: str, *, rows_processed: int, batches: int, last_cursor: Any, now_ms: int) -> bool:
        params = {
            "id": self._d.dialect.uid_param(row_id),
            "rows": rows_processed,
            "batches": batches,
            "cursor": dumps(last_cursor),
            "now": self._d.dialect.at(now_ms),
        }
        return bool(self._query(self.sql.SQL_BACKFILL_PROGRESS, params))

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
            "id": self._d.dialect.uid_param(row_id),
            "status": status,
            "rows": rows_processed,
            "batches": batches,
            "error_code": error_code,
            "now": self._d.dialect.at(now_ms),
        }
        return bool(self._query(self.sql.SQL_BACKFILL_FINISH, params))

    def completed(self, name: str, tenant_id: str | None) -> BackfillRun | None:
        rows = self._query(self.sql.SQL_BACKFILL_COMPLETED, {"name": name, "tenant_id": tenant_id})
        return self._run(rows[0]) if rows else None

    def list(
        self, *, name: str | None = None, status: BackfillStatus | None = None, limit: int = 100
    ) -> builtins.list[BackfillRun]:
        rows = self._query(self.sql.SQL_BACKFILL_LIST, {"name": name, "status": status, "limit": limit})
        return [self._run(row) for row in rows]
