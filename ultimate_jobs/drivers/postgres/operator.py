"""The Postgres driver's operator store (``OperatorStore``): the memory driver's semantics, error
codes included, over the ``SQL_*`` statements of :mod:`.queries.operator`.

Every operation is one statement — a refusal is decided in Python from what that statement saw, so
the row the refusal names is the row the statement locked. A requeue wraps its statement in
``transaction.atomic`` (a savepoint inside the caller's transaction): its unique violation must not
abort the caller's transaction.
"""

from __future__ import annotations

import builtins
import json
from typing import Any

from django.db import IntegrityError, transaction

from ...contracts.operator import MAX_BULK_ROWS, BulkFilter, BulkResult, JobRecord, WorkerInfo
from ...errors import JobDuplicateError
from ..sql import operator as shared
from .queries import operator as sql

LIVE_KEY_INDEX = "x_jobs_name_tenant_idempotency_live_idx"
"""The partial unique index whose violation means "a live job holds this key" (X_JOB_DUPLICATE)."""

REQUEUE_MANY_TRIES = 3
"""How often requeue_many re-runs after a concurrent enqueue took one of its keys mid-statement."""


class PostgresOperatorStore(shared.SqlOperatorStore):
    """``driver.operator`` for the Postgres driver: every operation one statement.

    >>> PostgresDriver(alias="default").operator.list(JobFilter(state="dead", limit=20))
    """

    sql = sql

    def _estimate(self, params: dict[str, Any]) -> int | None:
        plan = self._query(sql.SQL_ESTIMATE_JOBS, params)[0][0]
        if isinstance(plan, str | bytes):  # a driver that hands EXPLAIN's JSON back as text
            plan = json.loads(plan)
        return int(plan[0]["Plan"]["Plan Rows"])

    # -- single-row operations -----------------------------------------------------------------

    def remove(self, job_id: str) -> None:
        job = self._dialect.uid_param(job_id)
        rows = self._query(sql.SQL_REMOVE_JOB, {"id": job}) if job else []
        if not rows:
            raise shared.not_found(job_id)
        shared.check_removable(job_id, rows[0][0])

    def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRecord:
        job = self._dialect.uid_param(job_id)
        if job is None:
            raise shared.not_found(job_id)
        try:
            with transaction.atomic(using=self._d.alias):
                rows = self._query(sql.SQL_JOB_REQUEUE, {"id": job, "from_step": from_step, "now": self._now()})
        except IntegrityError as exc:
            if not _holds_live_key(exc):
                raise
            found = self._query(sql.SQL_LIVE_HOLDER, {"id": job})
            holder, key = (str(found[0][0]), found[0][1]) if found else ("(gone)", None)
            raise shared.duplicate(job_id, key, holder) from exc
        if not rows:
            raise shared.not_found(job_id)
        state, key, holder, step_found, _notified, *moved = rows[0]
        shared.check_requeueable(job_id, state)
        if holder is not None:
            raise shared.duplicate(job_id, key, str(holder))
        if from_step is not None and not step_found:
            raise shared.step_not_found(job_id, from_step)
        return self._record(tuple(moved))

    def promote(self, job_id: str) -> JobRecord:
        job = self._dialect.uid_param(job_id)
        rows = self._query(sql.SQL_JOB_PROMOTE, {"id": job, "now": self._now()}) if job else []
        if not rows:
            raise shared.not_found(job_id)
        state, _notified, *moved = rows[0]
        if moved[0] is None:
            raise shared.not_promotable(job_id, state)
        return self._record(tuple(moved))

    # -- bulk ----------------------------------------------------------------------------------

    def _bulk_params(self, flt: BulkFilter) -> dict[str, Any]:
        return {
            "state": flt.state,
            "queue": flt.queue,
            "name": flt.name,
            "tenant_id": flt.tenant_id,
            "max_rows": MAX_BULK_ROWS,
            "now": self._now(),
        }

    def requeue_many(self, flt: BulkFilter) -> BulkResult:
        shared.check_bulk(flt, "requeue")
        for attempt in range(1, REQUEUE_MANY_TRIES + 1):
            try:
                with transaction.atomic(using=self._d.alias):
                    [(affected, candidates, _notified)] = self._query(sql.SQL_REQUEUE_MANY, self._bulk_params(flt))
                return BulkResult(affected=affected, remaining=max(0, candidates - affected))
            except IntegrityError as exc:
                # A live row took one of the keys after the statement's snapshot: the next run sees it held.
                if not _holds_live_key(exc):
                    raise
                if attempt == REQUEUE_MANY_TRIES:
                    raise JobDuplicateError(
                        f"requeue_many over {flt.state!r} kept racing live enqueues of the same keys; run it again",
                        {"state": flt.state},
                    ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def remove_many(self, flt: BulkFilter) -> BulkResult:
        shared.check_bulk(flt, "remove")
        [(affected, matching)] = self._query(sql.SQL_REMOVE_MANY, self._bulk_params(flt))
        return BulkResult(affected=affected, remaining=max(0, matching - affected))

    def promote_many(self, flt: BulkFilter) -> BulkResult:
        shared.check_bulk(flt, "promote")
        [(affected, waiting, _notified)] = self._query(sql.SQL_PROMOTE_MANY, self._bulk_params(flt))
        return BulkResult(affected=affected, remaining=max(0, waiting - affected))

    # -- workers and counters ------------------------------------------------------------------

    def workers(self) -> builtins.list[WorkerInfo]:
        return self._workers(
            self._query(sql.SQL_WORKERS, {"now": self._now(), "window": self._d.visibility_timeout_ms})
        )

    def _ends_after(self, since_ms: int) -> dict[str, Any]:
        return {"since": since_ms}


def _holds_live_key(exc: IntegrityError) -> bool:
    """Whether ``exc`` is the live-key index refusing a second live row for one key."""
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None) == LIVE_KEY_INDEX
