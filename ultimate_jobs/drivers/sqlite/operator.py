"""The SQLite driver's operator store (``OperatorStore``): the memory driver's semantics, error codes
included, over the statements of :mod:`.queries.operator`. An operation that reads before it writes runs in
one ``BEGIN IMMEDIATE`` transaction, so the row a refusal names is the row the operation saw."""

from __future__ import annotations

import builtins
from typing import Any

from ...contracts.operator import MAX_BULK_ROWS, BulkFilter, BulkResult, JobRecord, WorkerInfo
from ...contracts.series import COUNTER_TIERS
from ..sql import operator as shared
from .queries import jobs as sql_hot
from .queries import operator as sql
from .rows import dashed, dumps, ts


class SqliteOperatorStore(shared.SqlOperatorStore):
    """``driver.operator`` for the SQLite driver.

    >>> SqliteDriver(alias="default").operator.list(JobFilter(state="dead", limit=20))
    """

    sql = sql

    # -- single-row operations -----------------------------------------------------------------

    def remove(self, job_id: str) -> None:
        job = self._dialect.uid_param(job_id)
        if job is None:
            raise shared.not_found(job_id)
        with self._d.executor.write():
            found = self._query(sql.SQL_JOB_STATE, {"id": job})
            if not found:
                raise shared.not_found(job_id)
            shared.check_removable(job_id, found[0][0])
            gone = self._query(sql.SQL_DELETE_JOB, {"id": job})
            self._query(sql_hot.SQL_DELETE_STEPS, {"ids": dumps([r[0] for r in gone])})

    def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRecord:
        job = self._dialect.uid_param(job_id)
        if job is None:
            raise shared.not_found(job_id)
        with self._d.executor.write():
            found = self._query(sql.SQL_JOB_STATE, {"id": job})
            if not found:
                raise shared.not_found(job_id)
            state, key, _queue, _run_at = found[0]
            shared.check_requeueable(job_id, state)
            holder = self._query(sql.SQL_LIVE_HOLDER, {"id": job})
            if holder:
                raise shared.duplicate(job_id, key, dashed(holder[0][0]))
            seq: int | None = None
            if from_step is not None:
                cut = self._query(sql.SQL_STEP_SEQ, {"id": job, "from_step": from_step})
                if not cut:
                    raise shared.step_not_found(job_id, from_step)
                seq = cut[0][0]
            moved = self._query(sql.SQL_JOB_REQUEUE, {"id": job, "now": ts(self._now())})
            if seq is not None:
                self._query(sql.SQL_CUT_STEPS, {"id": job, "seq": seq})
        record = self._record(moved[0])
        self._d.announce([record.queue])
        return record

    def promote(self, job_id: str) -> JobRecord:
        job = self._dialect.uid_param(job_id)
        if job is None:
            raise shared.not_found(job_id)
        with self._d.executor.write():
            found = self._query(sql.SQL_JOB_STATE, {"id": job})
            if not found:
                raise shared.not_found(job_id)
            moved = self._query(sql.SQL_JOB_PROMOTE, {"id": job, "now": ts(self._now())})
        if not moved:
            state = found[0][0]
            raise shared.not_promotable(job_id, state)
        record = self._record(moved[0])
        self._d.announce([record.queue])
        return record

    # -- bulk ----------------------------------------------------------------------------------

    def _bulk_params(self, flt: BulkFilter) -> dict[str, Any]:
        return {"state": flt.state, "queue": flt.queue, "name": flt.name, "tenant_id": flt.tenant_id}

    def requeue_many(self, flt: BulkFilter) -> BulkResult:
        shared.check_bulk(flt, "requeue")
        with self._d.executor.write():
            candidates = [r[0] for r in self._query(sql.SQL_REQUEUE_MANY_PICK, self._bulk_params(flt))]
            picked = candidates[:MAX_BULK_ROWS]
            moved = self._query(sql.SQL_REQUEUE_IDS, {"ids": dumps(picked), "state": flt.state, "now": ts(self._now())})
        self._d.announce([r[0] for r in moved])
        return BulkResult(affected=len(moved), remaining=max(0, len(candidates) - len(moved)))

    def remove_many(self, flt: BulkFilter) -> BulkResult:
        shared.check_bulk(flt, "remove")
        with self._d.executor.write():
            params = {**self._bulk_params(flt), "waiting": 0, "now": None}
            matching = [r[0] for r in self._query(sql.SQL_BULK_PICK, params)]
            gone = self._query(sql.SQL_DELETE_IDS, {"ids": dumps(matching[:MAX_BULK_ROWS]), "state": flt.state})
            self._query(sql_hot.SQL_DELETE_STEPS, {"ids": dumps([r[0] for r in gone])})
        return BulkResult(affected=len(gone), remaining=max(0, len(matching) - len(gone)))

    def promote_many(self, flt: BulkFilter) -> BulkResult:
        shared.check_bulk(flt, "promote")
        now = ts(self._now())
        with self._d.executor.write():
            waiting = [
                r[0] for r in self._query(sql.SQL_BULK_PICK, {**self._bulk_params(flt), "waiting": 1, "now": now})
            ]
            moved = self._query(
                sql.SQL_PROMOTE_IDS, {"ids": dumps(waiting[:MAX_BULK_ROWS]), "state": flt.state, "now": now}
            )
        self._d.announce([r[0] for r in moved])
        return BulkResult(affected=len(moved), remaining=max(0, len(waiting) - len(moved)))

    # -- workers -------------------------------------------------------------------------------

    def workers(self) -> builtins.list[WorkerInfo]:
        cutoff = ts(self._now() - self._d.visibility_timeout_ms)
        self._query(sql.SQL_EXPIRE_WORKERS, {"cutoff": cutoff})
        return self._workers(self._query(sql.SQL_WORKERS, {"cutoff": cutoff}))

    # -- counters ------------------------------------------------------------------------------

    def _ends_after(self, since_ms: int) -> dict[str, Any]:
        return {f"after_{i}": ts(since_ms - width) for i, (width, _) in enumerate(COUNTER_TIERS)}
