"""The SQLite driver's operator surface (``JobIntrospection``): the memory driver's semantics, error codes
included, over the statements of :mod:`.queries.introspect`. An operation that reads before it writes runs in
one ``BEGIN IMMEDIATE`` transaction, so the row a refusal names is the row the operation saw."""

from __future__ import annotations

import builtins
import logging
from typing import TYPE_CHECKING, Any

from ...errors import (
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRemovableError,
    JobNotRequeueableError,
)
from ...logs import log_event
from ..base import (
    COUNTER_TIERS,
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
)
from ..postgres.introspect import _cursor as _uuid_cursor
from ..postgres.introspect import _duplicate, _not_found
from ..postgres.introspect import _id_range as _uuid_range
from .queries import introspect as sql
from .queries import jobs as sql_hot
from .rows import dashed, dumps, hex_id, job_record, ms, step_record, ts, worker_info, worker_params

if TYPE_CHECKING:
    from .driver import SqliteDriver


class SqliteIntrospection:
    """``driver.introspect`` for the SQLite driver.

    >>> SqliteDriver(alias="default").introspect.list(JobFilter(state="dead", limit=20))
    """

    def __init__(self, driver: SqliteDriver) -> None:
        self._d = driver

    def _query(self, statement: str, params: dict[str, Any]) -> builtins.list[tuple[Any, ...]]:
        return self._d.executor.query(statement, params)

    def _now(self) -> int:
        return self._d.clock.now_ms()

    # -- reads ---------------------------------------------------------------------------------

    def get(self, job_id: str) -> JobRecord | None:
        job = hex_id(job_id)
        rows = self._query(sql.SQL_GET_JOB, {"id": job}) if job else []
        return job_record(rows[0]) if rows else None

    def steps(self, job_id: str) -> builtins.list[StepRecord]:
        job = hex_id(job_id)
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
            "created_from": None if flt.created_from_ms is None else ts(flt.created_from_ms),
            "created_to": None if flt.created_to_ms is None else ts(flt.created_to_ms),
            "cursor_at": ts(cursor[0]) if cursor else None,
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
        job = hex_id(job_id)
        if job is None:
            raise _not_found(job_id)
        with self._d.executor.write():
            found = self._query(sql.SQL_JOB_STATE, {"id": job})
            if not found:
                raise _not_found(job_id)
            if found[0][0] == "running":
                raise JobNotRemovableError(
                    f"job {job_id} is running. Fix: python manage.py jobs cancel {job_id} --json", {"job_id": job_id}
                )
            gone = self._query(sql.SQL_DELETE_JOB, {"id": job})
            self._query(sql_hot.SQL_DELETE_STEPS, {"ids": dumps([r[0] for r in gone])})

    def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRecord:
        job = hex_id(job_id)
        if job is None:
            raise _not_found(job_id)
        with self._d.executor.write():
            found = self._query(sql.SQL_JOB_STATE, {"id": job})
            if not found:
                raise _not_found(job_id)
            state, key = found[0][0], found[0][1]
            if state in LIVE_STATES:
                raise JobNotRequeueableError(
                    f"job {job_id} is {state}; only a finished job (done, failed, dead, cancelled) can be requeued",
                    {"job_id": job_id, "state": state},
                )
            holder = self._query(sql.SQL_LIVE_HOLDER, {"id": job})
            if holder:
                raise _duplicate(job_id, key, dashed(holder[0][0]))
            seq: int | None = None
            if from_step is not None:
                cut = self._query(sql.SQL_STEP_SEQ, {"id": job, "from_step": from_step})
                if not cut:
                    raise JobNotFoundError(
                        f"job {job_id} has no step {from_step!r}. Fix: python manage.py jobs show {job_id} --json",
                        {"job_id": job_id, "step": from_step},
                    )
                seq = cut[0][0]
            moved = self._query(sql.SQL_JOB_REQUEUE, {"id": job, "now": ts(self._now())})
            if seq is not None:
                self._query(sql.SQL_CUT_STEPS, {"id": job, "seq": seq})
        record = job_record(moved[0])
        self._d.announce([record.queue])
        return record

    def cancel(self, job_id: str, reason: str | None = None) -> JobRecord | None:
        job = hex_id(job_id)
        if job is None:
            return None
        params = {"id": job, "error": f"cancelled: {reason or 'by an operator'}", "now": ts(self._now())}
        rows = self._query(sql.SQL_CANCEL_JOB, params)
        return job_record(rows[0]) if rows else None

    def promote(self, job_id: str) -> JobRecord:
        job = hex_id(job_id)
        if job is None:
            raise _not_found(job_id)
        with self._d.executor.write():
            found = self._query(sql.SQL_JOB_STATE, {"id": job})
            if not found:
                raise _not_found(job_id)
            moved = self._query(sql.SQL_JOB_PROMOTE, {"id": job, "now": ts(self._now())})
        if not moved:
            state = found[0][0]
            raise JobNotPromotableError(
                f"job {job_id} is {state} and not waiting on its run time", {"job_id": job_id, "state": state}
            )
        record = job_record(moved[0])
        self._d.announce([record.queue])
        return record

    # -- bulk ----------------------------------------------------------------------------------

    def _bulk_params(self, flt: BulkFilter) -> dict[str, Any]:
        return {"state": flt.state, "queue": flt.queue, "name": flt.name, "tenant_id": flt.tenant_id}

    def requeue_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state not in REQUEUEABLE_STATES:
            raise JobNotRequeueableError(
                f"requeue_many over {flt.state!r}: only finished states {REQUEUEABLE_STATES} can be requeued",
                {"state": flt.state},
            )
        with self._d.executor.write():
            candidates = [r[0] for r in self._query(sql.SQL_REQUEUE_MANY_PICK, self._bulk_params(flt))]
            picked = candidates[:MAX_BULK_ROWS]
            moved = self._query(sql.SQL_REQUEUE_IDS, {"ids": dumps(picked), "state": flt.state, "now": ts(self._now())})
        self._d.announce([r[0] for r in moved])
        return BulkResult(affected=len(moved), remaining=max(0, len(candidates) - len(moved)))

    def remove_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state == "running":
            raise JobNotRemovableError(
                "remove_many cannot remove running jobs. Fix: python manage.py jobs cancel <id> --json",
                {"state": flt.state},
            )
        with self._d.executor.write():
            params = {**self._bulk_params(flt), "waiting": 0, "now": None}
            matching = [r[0] for r in self._query(sql.SQL_BULK_PICK, params)]
            gone = self._query(sql.SQL_DELETE_IDS, {"ids": dumps(matching[:MAX_BULK_ROWS]), "state": flt.state})
            self._query(sql_hot.SQL_DELETE_STEPS, {"ids": dumps([r[0] for r in gone])})
        return BulkResult(affected=len(gone), remaining=max(0, len(matching) - len(gone)))

    def promote_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state not in PROMOTABLE_STATES:
            raise JobNotPromotableError(
                f"promote_many over {flt.state!r}: only {PROMOTABLE_STATES} rows wait on a run time",
                {"state": flt.state},
            )
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

    # -- pauses --------------------------------------------------------------------------------

    def pause_queue(self, queue: str) -> None:
        self._query(sql.SQL_PAUSE_QUEUE, {"queue": queue, "now": ts(self._now())})

    def resume_queue(self, queue: str) -> None:
        self._query(sql.SQL_RESUME_QUEUE, {"queue": queue})
        self._d.announce([queue])

    def paused_queues(self) -> builtins.list[str]:
        return [r[0] for r in self._query(sql.SQL_PAUSED_QUEUES, {})]

    def pause_task(self, task: str) -> None:
        self._query(sql.SQL_PAUSE_TASK, {"task": task, "now": ts(self._now())})

    def resume_task(self, task: str) -> None:
        self._query(sql.SQL_RESUME_TASK, {"task": task})

    def paused_tasks(self) -> builtins.list[str]:
        return [r[0] for r in self._query(sql.SQL_PAUSED_TASKS, {})]

    # -- workers -------------------------------------------------------------------------------

    def record_worker(self, info: WorkerInfo) -> None:
        self._query(sql_hot.SQL_RECORD_WORKER, worker_params(info))

    def remove_worker(self, worker_id: str) -> None:
        self._query(sql.SQL_REMOVE_WORKER, {"id": worker_id})

    def workers(self) -> builtins.list[WorkerInfo]:
        cutoff = ts(self._now() - self._d.visibility_timeout_ms)
        self._query(sql.SQL_EXPIRE_WORKERS, {"cutoff": cutoff})
        return [worker_info(row) for row in self._query(sql.SQL_WORKERS, {"cutoff": cutoff})]

    # -- counters ------------------------------------------------------------------------------

    @staticmethod
    def _ends_after(since_ms: int) -> dict[str, str]:
        return {f"after_{i}": ts(since_ms - width) for i, (width, _) in enumerate(COUNTER_TIERS)}

    def counters(self, *, job: str, since_ms: int) -> builtins.list[CounterBucket]:
        rows = self._query(sql.SQL_COUNTERS, {"job": job, **self._ends_after(since_ms)})
        return [
            CounterBucket(name, ms(bucket), width, done, retried, failed, dead, duration)
            for name, bucket, width, done, retried, failed, dead, duration in rows
        ]

    def counter_totals(self, since_ms: int) -> builtins.list[CounterTotals]:
        return [CounterTotals(*row) for row in self._query(sql.SQL_COUNTER_TOTALS, self._ends_after(since_ms))]

    def rollup_counters(self) -> int:
        with self._d.executor.write():
            return self.rollup_at(self._now())

    def rollup_at(self, now_ms: int) -> int:
        """The rollup at ``now_ms``, on the caller's transaction (the leader runs it with its renewal)."""
        cutoffs = {f"expired_{i}": ts(now_ms - keep - width) for i, (width, keep) in enumerate(COUNTER_TIERS)}
        expired = self._query(sql.SQL_ROLLUP_EXPIRED, cutoffs)
        if not expired:
            return 0
        folded: dict[tuple[str, int, int], list[int]] = {}
        for _, job, width, bucket, done, retried, failed, dead, duration in expired:
            bucket_ms = ms(bucket)
            dest = next(
                (w for w, keep in sorted(COUNTER_TIERS) if w > width and bucket_ms - bucket_ms % w + w > now_ms - keep),
                None,
            )
            if dest is None:
                continue  # past every tier's retention: dropped
            sums = folded.setdefault((job, dest, bucket_ms - bucket_ms % dest), [0, 0, 0, 0, 0])
            for i, value in enumerate((done, retried, failed, dead, duration)):
                sums[i] += value
        self._query(sql.SQL_ROLLUP_DELETE, {"ids": dumps([row[0] for row in expired])})
        for (job, width, bucket_ms), (done, retried, failed, dead, duration) in folded.items():
            self._query(
                sql.SQL_COUNTER_ADD,
                {
                    "job": job,
                    "width": width,
                    "bucket": ts(bucket_ms),
                    "done": done,
                    "retried": retried,
                    "failed": failed,
                    "dead": dead,
                    "duration": duration,
                },
            )
        return len(expired)

    # -- progress and task fires ---------------------------------------------------------------

    def record_progress(self, job_id: str, ref: ClaimRef, progress: Progress) -> bool:
        job, claim = hex_id(job_id), hex_id(ref.claim)
        landed: builtins.list[tuple[Any, ...]] = []
        if job is not None and claim is not None:
            value = {"done": progress.done, "total": progress.total, "note": progress.note, "at_ms": progress.at_ms}
            params = {"id": job, "worker": ref.worker_id, "claim": claim, "progress": dumps(value)}
            landed = self._query(sql.SQL_RECORD_PROGRESS, params)
        if not landed:
            log_event(
                logging.WARNING, "jobs.settle.unowned", job_id=job_id, op="record_progress", worker_id=ref.worker_id
            )
        return bool(landed)

    def task_fires(self) -> builtins.list[TaskFire]:
        rows = self._query(sql.SQL_TASK_FIRES, {"limit": MAX_TASK_FIRES})
        return [TaskFire(task, ms(occurrence), ms(fired)) for task, occurrence, fired in rows]


def _cursor(cursor: str | None, which: str) -> tuple[int, str] | None:
    """A decoded cursor (the Postgres driver's rules and refusal) with its id as the column text."""
    decoded = _uuid_cursor(cursor, which)
    return None if decoded is None else (decoded[0], decoded[1].replace("-", ""))


def _id_range(prefix: str | None) -> tuple[str | None, str | None] | None:
    """The id column range whose dashed text starts with ``prefix`` (the Postgres driver's range, as
    column text): ``(None, None)`` for no prefix, ``None`` for a prefix no id's canonical text starts with."""
    found = _uuid_range(prefix)
    if found is None or found[0] is None or found[1] is None:
        return found
    return found[0].replace("-", ""), found[1].replace("-", "")
