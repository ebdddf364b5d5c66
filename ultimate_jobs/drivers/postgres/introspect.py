"""The Postgres driver's operator surface (``JobIntrospection``): the memory driver's semantics, error
codes included, over the ``SQL_*`` statements of :mod:`.queries.introspect`.

Every operation is one statement — a refusal is decided in Python from what that statement saw, so
the row the refusal names is the row the statement locked. A requeue wraps its statement in
``transaction.atomic`` (a savepoint inside the caller's transaction): its unique violation must not
abort the caller's transaction.
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction

from ...errors import (
    JobDuplicateError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRemovableError,
    JobNotRequeueableError,
    JobPageInvalidError,
)
from ...logs import log_event
from ..base import (
    LIVE_STATES,
    MAX_BULK_ROWS,
    MAX_TASK_FIRES,
    PROMOTABLE_STATES,
    REQUEUEABLE_STATES,
    BulkFilter,
    BulkResult,
    ClaimRef,
    CounterBucket,
    CounterTotals,
    JobFilter,
    JobPage,
    JobRecord,
    Progress,
    StepRecord,
    TaskFire,
    WorkerInfo,
    check_page,
    decode_cursor,
)
from .executor import from_jsonb, jsonb
from .queries import introspect as sql
from .rows import job_record, step_record, worker_row

if TYPE_CHECKING:
    from .driver import PostgresDriver

LIVE_KEY_INDEX = "x_jobs_name_tenant_idempotency_live_idx"
"""The partial unique index whose violation means "a live job holds this key" (X_JOB_DUPLICATE)."""

REQUEUE_MANY_TRIES = 3
"""How often requeue_many re-runs after a concurrent enqueue took one of its keys mid-statement."""

_UUID_LOW = "00000000-0000-0000-0000-000000000000"
_UUID_HIGH = "ffffffff-ffff-ffff-ffff-ffffffffffff"
_HEX = frozenset("0123456789abcdef")


class PostgresIntrospection:
    """``driver.introspect`` for the Postgres driver: reads ``driver.executor``, ``driver.clock``,
    ``driver.alias`` and ``driver.visibility_timeout_ms``.

    >>> PostgresDriver(alias="default").introspect.list(JobFilter(state="dead", limit=20))
    """

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver

    def _query(self, statement: str, params: dict[str, Any]) -> builtins.list[tuple[Any, ...]]:
        return self._d.executor.query(statement, params)

    def _now(self) -> int:
        return self._d.clock.now_ms()

    # -- reads ---------------------------------------------------------------------------------

    def get(self, job_id: str) -> JobRecord | None:
        job = _uuid(job_id)
        rows = self._query(sql.SQL_GET_JOB, {"id": job}) if job else []
        return job_record(rows[0]) if rows else None

    def steps(self, job_id: str) -> builtins.list[StepRecord]:
        job = _uuid(job_id)
        return [step_record(r) for r in self._query(sql.SQL_JOB_STEPS, {"id": job})] if job else []

    def list(self, flt: JobFilter) -> JobPage:
        check_page(flt)
        after = _cursor(flt.after, "after")
        before = _cursor(flt.before, "before")
        id_range = _id_range(flt.id_prefix)
        if id_range is None:  # a prefix no uuid's text starts with
            return JobPage(rows=(), limit=flt.limit)
        cursor = after or before
        params = {
            "queue": flt.queue,
            "name": flt.name,
            "state": flt.state,
            "tenant_id": flt.tenant_id,
            "id_low": id_range[0],
            "id_high": id_range[1],
            "idempotency_key": flt.idempotency_key,
            "created_from": flt.created_from_ms,
            "created_to": flt.created_to_ms,
            "cursor_at": cursor[0] if cursor else None,
            "cursor_id": cursor[1] if cursor else None,
            "limit": flt.limit,
        }
        if before is not None:
            rows = self._query(sql.SQL_LIST_JOBS_NEWER, params)[::-1]
        else:
            rows = self._query(sql.SQL_LIST_JOBS, params)
        return JobPage(rows=tuple(job_record(r) for r in rows), limit=flt.limit)

    # -- single-row operations -----------------------------------------------------------------

    def remove(self, job_id: str) -> None:
        job = _uuid(job_id)
        rows = self._query(sql.SQL_REMOVE_JOB, {"id": job}) if job else []
        if not rows:
            raise _not_found(job_id)
        if rows[0][0] == "running":
            raise JobNotRemovableError(
                f"job {job_id} is running. Fix: python manage.py jobs cancel {job_id} --json", {"job_id": job_id}
            )

    def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRecord:
        job = _uuid(job_id)
        if job is None:
            raise _not_found(job_id)
        try:
            with transaction.atomic(using=self._d.alias):
                rows = self._query(sql.SQL_JOB_REQUEUE, {"id": job, "from_step": from_step, "now": self._now()})
        except IntegrityError as exc:
            if not _holds_live_key(exc):
                raise
            found = self._query(sql.SQL_LIVE_HOLDER, {"id": job})
            holder, key = (str(found[0][0]), found[0][1]) if found else ("(gone)", None)
            raise _duplicate(job_id, key, holder) from exc
        if not rows:
            raise _not_found(job_id)
        state, key, holder, step_found, _notified, *moved = rows[0]
        if state in LIVE_STATES:
            raise JobNotRequeueableError(
                f"job {job_id} is {state}; only a finished job (done, failed, dead, cancelled) can be requeued",
                {"job_id": job_id, "state": state},
            )
        if holder is not None:
            raise _duplicate(job_id, key, str(holder))
        if from_step is not None and not step_found:
            raise JobNotFoundError(
                f"job {job_id} has no step {from_step!r}. Fix: python manage.py jobs show {job_id} --json",
                {"job_id": job_id, "step": from_step},
            )
        return job_record(moved)

    def cancel(self, job_id: str, reason: str | None = None) -> JobRecord | None:
        job = _uuid(job_id)
        if job is None:
            return None
        params = {"id": job, "error": f"cancelled: {reason or 'by an operator'}", "now": self._now()}
        rows = self._query(sql.SQL_CANCEL_JOB, params)
        return job_record(rows[0]) if rows else None

    def promote(self, job_id: str) -> JobRecord:
        job = _uuid(job_id)
        rows = self._query(sql.SQL_JOB_PROMOTE, {"id": job, "now": self._now()}) if job else []
        if not rows:
            raise _not_found(job_id)
        state, _notified, *moved = rows[0]
        if moved[0] is None:
            raise JobNotPromotableError(
                f"job {job_id} is {state} and not waiting on its run time", {"job_id": job_id, "state": state}
            )
        return job_record(moved)

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
        if flt.state not in REQUEUEABLE_STATES:
            raise JobNotRequeueableError(
                f"requeue_many over {flt.state!r}: only finished states {REQUEUEABLE_STATES} can be requeued",
                {"state": flt.state},
            )
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
        if flt.state == "running":
            raise JobNotRemovableError(
                "remove_many cannot remove running jobs. Fix: python manage.py jobs cancel <id> --json",
                {"state": flt.state},
            )
        [(affected, matching)] = self._query(sql.SQL_REMOVE_MANY, self._bulk_params(flt))
        return BulkResult(affected=affected, remaining=max(0, matching - affected))

    def promote_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state not in PROMOTABLE_STATES:
            raise JobNotPromotableError(
                f"promote_many over {flt.state!r}: only {PROMOTABLE_STATES} rows wait on a run time",
                {"state": flt.state},
            )
        [(affected, waiting, _notified)] = self._query(sql.SQL_PROMOTE_MANY, self._bulk_params(flt))
        return BulkResult(affected=affected, remaining=max(0, waiting - affected))

    # -- pauses --------------------------------------------------------------------------------

    def pause_queue(self, queue: str) -> None:
        self._query(sql.SQL_PAUSE_QUEUE, {"queue": queue, "now": self._now()})

    def resume_queue(self, queue: str) -> None:
        self._query(sql.SQL_RESUME_QUEUE, {"queue": queue})

    def paused_queues(self) -> builtins.list[str]:
        return [r[0] for r in self._query(sql.SQL_PAUSED_QUEUES, {})]

    def pause_task(self, task: str) -> None:
        self._query(sql.SQL_PAUSE_TASK, {"task": task, "now": self._now()})

    def resume_task(self, task: str) -> None:
        self._query(sql.SQL_RESUME_TASK, {"task": task})

    def paused_tasks(self) -> builtins.list[str]:
        return [r[0] for r in self._query(sql.SQL_PAUSED_TASKS, {})]

    # -- workers -------------------------------------------------------------------------------

    def record_worker(self, info: WorkerInfo) -> None:
        self._query(sql.SQL_RECORD_WORKER, worker_row(info))

    def remove_worker(self, worker_id: str) -> None:
        self._query(sql.SQL_REMOVE_WORKER, {"id": worker_id})

    def workers(self) -> builtins.list[WorkerInfo]:
        rows = self._query(sql.SQL_WORKERS, {"now": self._now(), "window": self._d.visibility_timeout_ms})
        return [
            WorkerInfo(
                id=worker_id,
                host=host,
                pid=pid,
                started_at_ms=started,
                queues=tuple(from_jsonb(queues)),
                slots=slots,
                in_flight=tuple(from_jsonb(in_flight)),
                heartbeat_at_ms=beat,
            )
            for worker_id, host, pid, started, queues, slots, in_flight, beat in rows
        ]

    # -- counters ------------------------------------------------------------------------------

    def counters(self, *, job: str, since_ms: int) -> builtins.list[CounterBucket]:
        rows = self._query(sql.SQL_COUNTERS, {"job": job, "since": since_ms})
        return [CounterBucket(*row) for row in rows]

    def counter_totals(self, since_ms: int) -> builtins.list[CounterTotals]:
        return [CounterTotals(*row) for row in self._query(sql.SQL_COUNTER_TOTALS, {"since": since_ms})]

    def rollup_counters(self) -> int:
        [(folded,)] = self._query(sql.SQL_ROLLUP_COUNTERS, {"now": self._now()})
        return int(folded)

    # -- progress and task fires ---------------------------------------------------------------

    def record_progress(self, job_id: str, ref: ClaimRef, progress: Progress) -> bool:
        job = _uuid(job_id)
        landed: Sequence[Any] = ()
        if job is not None:
            value = {"done": progress.done, "total": progress.total, "note": progress.note, "at_ms": progress.at_ms}
            params = {"id": job, "worker": ref.worker_id, "claim": ref.claim, "progress": jsonb(value)}
            landed = self._query(sql.SQL_RECORD_PROGRESS, params)
        if not landed:
            log_event(
                logging.WARNING, "jobs.settle.unowned", job_id=job_id, op="record_progress", worker_id=ref.worker_id
            )
        return bool(landed)

    def task_fires(self) -> builtins.list[TaskFire]:
        return [TaskFire(*row) for row in self._query(sql.SQL_TASK_FIRES, {"limit": MAX_TASK_FIRES})]


def _uuid(value: str) -> str | None:
    """``value`` as a canonical uuid text, or ``None`` when it cannot name a row (ids are UUIDs)."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return None


def _cursor(cursor: str | None, which: str) -> tuple[int, str] | None:
    """A decoded cursor whose id can name a row; anything else is ``X_JOB_PAGE_INVALID``."""
    if cursor is None:
        return None
    created, job_id = decode_cursor(cursor, which=which)
    canonical = _uuid(job_id)
    if canonical is None:
        raise JobPageInvalidError(
            f"filter.{which} is not a cursor a page produced; pass job_cursor(row) of a row from the previous page. "
            "Fix: python manage.py jobs list --limit 200 --json",
            {"cursor": which},
        )
    return created, canonical


def _id_range(prefix: str | None) -> tuple[str | None, str | None] | None:
    """The uuid range whose text starts with ``prefix``: ``(None, None)`` for no prefix, ``None`` for a
    prefix no uuid's canonical text starts with (ids print lowercase, dashed)."""
    if prefix is None:
        return None, None
    if len(prefix) > len(_UUID_LOW):
        return None
    for ch, shape in zip(prefix, _UUID_LOW, strict=False):
        if (shape == "-") != (ch == "-") or (ch != "-" and ch not in _HEX):
            return None
    return prefix + _UUID_LOW[len(prefix) :], prefix + _UUID_HIGH[len(prefix) :]


def _holds_live_key(exc: IntegrityError) -> bool:
    """Whether ``exc`` is the live-key index refusing a second live row for one key."""
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None) == LIVE_KEY_INDEX


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(
        f"no queue holds job {job_id!r}. Fix: python manage.py jobs list --json", {"job_id": job_id}
    )


def _duplicate(job_id: str, key: str | None, holder: str) -> JobDuplicateError:
    return JobDuplicateError(
        f"job {job_id}'s idempotency key {key!r} is held by live job {holder}", {"job_id": job_id, "holder": holder}
    )
