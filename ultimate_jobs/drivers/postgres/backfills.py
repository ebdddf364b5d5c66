"""The Postgres driver's backfill ledger: ``driver.backfills`` over ``x_backfills``, through the
``SQL_BACKFILL_*`` statements of :mod:`.queries.backfills` on the driver's own executor."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, Literal

from ...ids import new_id
from ..base import BackfillBegin, BackfillRun, BackfillStatus
from .executor import from_jsonb, jsonb
from .queries import backfills as sql

if TYPE_CHECKING:
    from .driver import PostgresDriver


class PostgresBackfillStore:
    """``driver.backfills`` for the Postgres driver: the ledger outlives every process, so a pass killed
    mid-sweep is still ``running`` on its row until a retry adopts it."""

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver

    def begin(self, begin: BackfillBegin) -> BackfillRun:
        params = {
            "id": new_id(),
            "name": begin.name,
            "tenant_id": begin.tenant_id,
            "checksum": begin.checksum,
            "app_version": begin.app_version,
            "job_id": begin.job_id,
            "run_id": begin.run_id,
            "now": begin.now_ms,
        }
        return _run(self._d.executor.query(sql.SQL_BACKFILL_BEGIN, params)[0])

    def progress(self, row_id: str, *, rows_processed: int, batches: int, last_cursor: Any, now_ms: int) -> bool:
        params = {"id": row_id, "rows": rows_processed, "batches": batches, "cursor": jsonb(last_cursor), "now": now_ms}
        return bool(self._d.executor.query(sql.SQL_BACKFILL_PROGRESS, params))

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
            "id": row_id,
            "status": status,
            "rows": rows_processed,
            "batches": batches,
            "error_code": error_code,
            "now": now_ms,
        }
        return bool(self._d.executor.query(sql.SQL_BACKFILL_FINISH, params))

    def completed(self, name: str, tenant_id: str | None) -> BackfillRun | None:
        rows = self._d.executor.query(sql.SQL_BACKFILL_COMPLETED, {"name": name, "tenant_id": tenant_id})
        return _run(rows[0]) if rows else None

    def list(
        self, *, name: str | None = None, status: BackfillStatus | None = None, limit: int = 100
    ) -> builtins.list[BackfillRun]:
        rows = self._d.executor.query(sql.SQL_BACKFILL_LIST, {"name": name, "status": status, "limit": limit})
        return [_run(row) for row in rows]


def _run(row: tuple[Any, ...]) -> BackfillRun:
    (id_, name, tenant, checksum, status, version, rows, batches, cursor, job, run, code, started, updated,
     completed) = row  # fmt: skip
    return BackfillRun(
        id=id_,
        name=name,
        tenant_id=tenant,
        checksum=checksum,
        status=status,
        app_version=version,
        rows_processed=int(rows),
        batches=int(batches),
        last_cursor=from_jsonb(cursor),
        job_id=job,
        run_id=run,
        error_code=code,
        started_at_ms=int(started),
        updated_at_ms=int(updated),
        completed_at_ms=int(completed) if completed is not None else None,
    )
