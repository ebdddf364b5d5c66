"""The memory driver's backfill ledger: ``driver.backfills`` in a process map, under the driver's lock —
the rules of the Postgres statements (``postgres.queries.backfills``), so the conformance suite answers alike."""

from __future__ import annotations

import builtins
import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from ...ids import new_id
from ..base import BackfillBegin, BackfillRun, BackfillStatus

if TYPE_CHECKING:
    from .driver import MemoryDriver


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
