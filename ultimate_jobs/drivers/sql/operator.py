"""The operator's store (``OperatorStore``) both SQL drivers share: the memory driver's semantics and
error codes, over the driver's executor, dialect and the catalogue named by ``sql``. The operations whose
algorithm differs (a requeue, a promote, the bulk moves, the workers' read) are the backend's own."""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from dataclasses import replace
from types import ModuleType
from typing import Any

from ...contracts.jobs import LIVE_STATES, PROMOTABLE_STATES, REQUEUEABLE_STATES, StepRecord
from ...contracts.operator import BulkFilter, JobFilter, JobPage, JobRecord, WorkerInfo, check_page
from ...contracts.ordering import COUNT_CAP, Cursor, JobCount, JobOrder, decode_cursor, opposite, order_parts
from ...contracts.schedules import MAX_TASK_FIRES, TaskFire
from ...contracts.series import CounterBucket, CounterTotals, QueueSample, WaitBucket, counter_bucket
from ...core.ids import ends_an_id
from ...errors import (
    JobDuplicateError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRemovableError,
    JobNotRequeueableError,
    JobPageInvalidError,
)
from ..counters import waits_of
from .dialect import Dialect
from .rows import JobRow, StepRow, WorkerRow, job_record, step_record, worker_info

_UUID_LOW = "00000000-0000-0000-0000-000000000000"
_UUID_HIGH = "ffffffff-ffff-ffff-ffff-ffffffffffff"
_HEX = frozenset("0123456789abcdef")


class SqlOperatorStore(ABC):
    """``driver.operator`` for an SQL driver: reads ``driver.executor``, ``driver.dialect``,
    ``driver.clock`` and ``driver.visibility_timeout_ms``."""

    sql: ModuleType

    def __init__(self, driver: Any) -> None:
        self._d = driver
        self._dialect: Dialect = driver.dialect

    def _query(self, statement: str, params: dict[str, Any]) -> builtins.list[tuple[Any, ...]]:
        return self._d.executor.query(statement, params)  # type: ignore[no-any-return]

    def _now(self) -> int:
        now: int = self._d.clock.now_ms()
        return now

    def _record(self, row: tuple[Any, ...]) -> JobRecord:
        return job_record(JobRow._make(row), self._dialect)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, job_id: str) -> JobRecord | None:
        job = self._dialect.uid_param(job_id)
        rows = self._query(self.sql.SQL_GET_JOB, {"id": job}) if job else []
        return self._record(rows[0]) if rows else None

    def steps(self, job_id: str) -> builtins.list[StepRecord]:
        job = self._dialect.uid_param(job_id)
        rows = self._query(self.sql.SQL_JOB_STEPS, {"id": job}) if job else []
        return [step_record(StepRow._make(r), self._dialect) for r in rows]

    def list(self, flt: JobFilter) -> JobPage:
        check_page(flt)
        column, _ = order_parts(flt.order)
        after = self._cursor(flt.after, "after", flt.order)
        before = self._cursor(flt.before, "before", flt.order)
        params = self._filter_params(flt)
        if params is None:  # a prefix no uuid's text starts with, a suffix none ends with
            return JobPage(rows=(), limit=flt.limit)
        cursor = after or before
        d = self._dialect
        params |= {
            "cursor_at": d.at(cursor.created_at_ms) if cursor else None,
            "cursor_id": cursor.id if cursor else None,
            "cursor_value": self._cursor_value(column, cursor),
            "limit": flt.limit,
            "window": COUNT_CAP,
        }
        # A page before the cursor walks the opposite order from it and is turned back into this one.
        walk = opposite(flt.order) if before is not None else flt.order
        if column == "created":
            statement = self.sql.SQL_LIST_JOBS if walk == "-created" else self.sql.SQL_LIST_JOBS_OLDEST
            rows, cut = [self._record(r) for r in self._query(statement, params)], False
        else:
            found = self._query(self.sql.SQL_LIST_JOBS_SORTED[walk], params)
            rows, cut = [self._record(r[:-1]) for r in found], any(bool(r[-1]) for r in found)
        if before is not None:
            rows.reverse()
        return JobPage(rows=tuple(rows), limit=flt.limit, window=COUNT_CAP if cut else None)

    def count(self, flt: JobFilter) -> JobCount:
        params = self._filter_params(flt)
        if params is None:
            return JobCount(rows=0, basis="count")
        params |= {"finished_only": order_parts(flt.order)[0] == "finished", "cap": COUNT_CAP}
        counted = int(self._query(self.sql.SQL_COUNT_JOBS, params)[0][0])
        if counted <= COUNT_CAP:
            return JobCount(rows=counted, basis="count")
        estimate = self._estimate(params)
        if estimate is not None and estimate > COUNT_CAP:
            return JobCount(rows=estimate, basis="planner")
        return JobCount(rows=COUNT_CAP, basis="bound")  # statistics older than the rows: say only "more"

    def _estimate(self, params: dict[str, Any]) -> int | None:
        """The database's estimate of the rows a count's filters match, or ``None`` where it keeps none."""
        return None

    def _filter_params(self, flt: JobFilter) -> dict[str, Any] | None:
        """The parameters of ``flt``'s filters, or ``None`` when no row can match (an id prefix no uuid's
        text starts with, a suffix none ends with)."""
        d = self._dialect
        id_range = id_range_of(flt.id_prefix)
        tail = id_tail_of(flt.id_suffix)
        if id_range is None or tail is None:
            return None
        return {
            "queue": flt.queue,
            "name": flt.name,
            "state": flt.state,
            "tenant_id": flt.tenant_id,
            "id_low": None if id_range[0] is None else d.uid_param(id_range[0]),
            "id_high": None if id_range[1] is None else d.uid_param(id_range[1]),
            "id_tail": tail or None,
            "idempotency_key": flt.idempotency_key,
            "created_from": d.at_or_none(flt.created_from_ms),
            "created_to": d.at_or_none(flt.created_to_ms),
        }

    def _cursor_value(self, column: str, cursor: Cursor | None) -> Any:
        """The cursor's sort value as the sorted statements compare it (an instant in the dialect's form)."""
        if cursor is None:
            return None
        if column in ("run_at", "finished"):
            assert isinstance(cursor.value, int)  # decode_cursor checked an instant column's value
            return self._dialect.at(cursor.value)
        return cursor.value

    def _cursor(self, cursor: str | None, which: str, order: JobOrder) -> Cursor | None:
        """A decoded cursor whose id can name a row (the id as its parameter); anything else is
        ``X_JOB_PAGE_INVALID``."""
        if cursor is None:
            return None
        decoded = decode_cursor(cursor, which=which, order=order)
        found = self._dialect.uid_param(decoded.id)
        if found is None:
            raise JobPageInvalidError(
                f"filter.{which} is not a cursor a page produced; pass job_cursor(row) of a row from the previous "
                "page. Fix: python manage.py jobs list --limit 200 --json",
                {"cursor": which},
            )
        return replace(decoded, id=found)

    # -- single-row operations -----------------------------------------------------------------

    def cancel(self, job_id: str, reason: str | None = None) -> JobRecord | None:
        job = self._dialect.uid_param(job_id)
        if job is None:
            return None
        params = {"id": job, "error": f"cancelled: {reason or 'by an operator'}", "now": self._dialect.at(self._now())}
        rows = self._query(self.sql.SQL_CANCEL_JOB, params)
        return self._record(rows[0]) if rows else None

    # -- pauses --------------------------------------------------------------------------------

    def pause_queue(self, queue: str) -> None:
        self._query(self.sql.SQL_PAUSE_QUEUE, {"queue": queue, "now": self._dialect.at(self._now())})

    def resume_queue(self, queue: str) -> None:
        self._query(self.sql.SQL_RESUME_QUEUE, {"queue": queue})
        self._d.announce([queue])

    def paused_queues(self) -> builtins.list[str]:
        return [r[0] for r in self._query(self.sql.SQL_PAUSED_QUEUES, {})]

    def pause_task(self, task: str) -> None:
        self._query(self.sql.SQL_PAUSE_TASK, {"task": task, "now": self._dialect.at(self._now())})

    def resume_task(self, task: str) -> None:
        self._query(self.sql.SQL_RESUME_TASK, {"task": task})

    def paused_tasks(self) -> builtins.list[str]:
        return [r[0] for r in self._query(self.sql.SQL_PAUSED_TASKS, {})]

    # -- workers -------------------------------------------------------------------------------

    def _workers(self, rows: builtins.list[tuple[Any, ...]]) -> builtins.list[WorkerInfo]:
        return [worker_info(WorkerRow._make(row), self._dialect) for row in rows]

    # -- counters ------------------------------------------------------------------------------

    @abstractmethod
    def _ends_after(self, since_ms: int) -> dict[str, Any]:
        """The parameters that pick the counter buckets ending after ``since_ms``."""

    def counters(self, *, job: str, since_ms: int) -> builtins.list[CounterBucket]:
        rows = self._query(self.sql.SQL_COUNTERS, {"job": job, **self._ends_after(since_ms)})
        return [
            counter_bucket(name, self._dialect.instant(bucket), width, values) for name, bucket, width, *values in rows
        ]

    def counter_totals(self, since_ms: int) -> builtins.list[CounterTotals]:
        return [CounterTotals(*row) for row in self._query(self.sql.SQL_COUNTER_TOTALS, self._ends_after(since_ms))]

    def counter_series(self, since_ms: int, width_ms: int) -> builtins.list[CounterBucket]:
        rows = self._query(self.sql.SQL_COUNTER_SERIES, {**self._ends_after(since_ms), "width": width_ms})
        return [counter_bucket("", int(at), width_ms, [int(v) for v in values]) for at, *values in rows]

    def wait_series(self, since_ms: int, width_ms: int) -> builtins.list[WaitBucket]:
        rows = self._query(self.sql.SQL_WAIT_SERIES, {**self._ends_after(since_ms), "width": width_ms})
        return waits_of(((queue, int(at), width_ms, index, count) for queue, at, index, count in rows), width_ms)

    def queue_samples(self, since_ms: int, width_ms: int) -> builtins.list[QueueSample]:
        rows = self._query(self.sql.SQL_QUEUE_SAMPLES, {"since": self._dialect.at(since_ms), "width": width_ms})
        return [QueueSample(queue, int(at), int(depth), age) for queue, at, depth, age in rows]

    # -- task fires ----------------------------------------------------------------------------

    def task_fires(self) -> builtins.list[TaskFire]:
        rows = self._query(self.sql.SQL_TASK_FIRES, {"limit": MAX_TASK_FIRES})
        d = self._dialect
        return [TaskFire(task, d.instant(occurrence), d.instant(fired)) for task, occurrence, fired in rows]


def id_range_of(prefix: str | None) -> tuple[str | None, str | None] | None:
    """The uuid range whose canonical text starts with ``prefix``: ``(None, None)`` for no prefix, ``None``
    for a prefix no uuid's canonical text starts with (ids print lowercase, dashed)."""
    if prefix is None:
        return None, None
    if len(prefix) > len(_UUID_LOW):
        return None
    for ch, shape in zip(prefix, _UUID_LOW, strict=False):
        if (shape == "-") != (ch == "-") or (ch != "-" and ch not in _HEX):
            return None
    return prefix + _UUID_LOW[len(prefix) :], prefix + _UUID_HIGH[len(prefix) :]


def id_tail_of(suffix: str | None) -> str | None:
    """The hex digits a uuid's canonical text ends with when it ends with ``suffix``: ``""`` for no suffix,
    ``None`` for a suffix no uuid's canonical text ends with (ids print lowercase, dashed)."""
    if suffix is None:
        return ""
    return suffix.replace("-", "") if ends_an_id(suffix) else None


def not_found(job_id: str) -> JobNotFoundError:
    """``X_JOB_NOT_FOUND`` for ``job_id``."""
    return JobNotFoundError(
        f"no queue holds job {job_id!r}. Fix: python manage.py jobs list --json", {"job_id": job_id}
    )


def duplicate(job_id: str, key: str | None, holder: str) -> JobDuplicateError:
    """``X_JOB_DUPLICATE``: a requeue of ``job_id`` met live job ``holder`` on its idempotency key."""
    return JobDuplicateError(
        f"job {job_id}'s idempotency key {key!r} is held by live job {holder}", {"job_id": job_id, "holder": holder}
    )


def check_removable(job_id: str, state: str) -> None:
    """``X_JOB_NOT_REMOVABLE`` when the row is running."""
    if state == "running":
        raise JobNotRemovableError(
            f"job {job_id} is running. Fix: python manage.py jobs cancel {job_id} --json", {"job_id": job_id}
        )


def check_requeueable(job_id: str, state: str) -> None:
    """``X_JOB_NOT_REQUEUEABLE`` when the row is live."""
    if state in LIVE_STATES:
        raise JobNotRequeueableError(
            f"job {job_id} is {state}; only a finished job (done, failed, dead, cancelled) can be requeued",
            {"job_id": job_id, "state": state},
        )


def step_not_found(job_id: str, step: str) -> JobNotFoundError:
    """``X_JOB_NOT_FOUND``: a requeue from a step the job never ran."""
    return JobNotFoundError(
        f"job {job_id} has no step {step!r}. Fix: python manage.py jobs show {job_id} --json",
        {"job_id": job_id, "step": step},
    )


def not_promotable(job_id: str, state: str) -> JobNotPromotableError:
    """``X_JOB_NOT_PROMOTABLE``: the row is not waiting on its run time."""
    return JobNotPromotableError(
        f"job {job_id} is {state} and not waiting on its run time", {"job_id": job_id, "state": state}
    )


def check_bulk(flt: BulkFilter, op: str) -> None:
    """The refusal of a bulk ``op`` (``requeue``, ``remove`` or ``promote``) over ``flt.state``."""
    if op == "requeue" and flt.state not in REQUEUEABLE_STATES:
        raise JobNotRequeueableError(
            f"requeue_many over {flt.state!r}: only finished states {REQUEUEABLE_STATES} can be requeued",
            {"state": flt.state},
        )
    if op == "remove" and flt.state == "running":
        raise JobNotRemovableError(
            "remove_many cannot remove running jobs. Fix: python manage.py jobs cancel <id> --json",
            {"state": flt.state},
        )
    if op == "promote" and flt.state not in PROMOTABLE_STATES:
        raise JobNotPromotableError(
            f"promote_many over {flt.state!r}: only {PROMOTABLE_STATES} rows wait on a run time",
            {"state": flt.state},
        )
