"""The memory driver's operator store (``driver.operator``, the ``OperatorStore`` contract): reads and
operator actions over the driver's rows, its worker registry and its counters (:mod:`.counters`)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from ...contracts.jobs import LIVE_STATES, PROMOTABLE_STATES, REQUEUEABLE_STATES, StepRecord
from ...contracts.operator import (
    MAX_BULK_ROWS,
    BulkFilter,
    BulkResult,
    JobFilter,
    JobPage,
    JobRecord,
    WorkerInfo,
    check_page,
)
from ...contracts.ordering import JobCount, after_cursor, decode_cursor, order_parts, sort_key
from ...contracts.schedules import MAX_TASK_FIRES, TaskFire
from ...contracts.series import CounterBucket, CounterTotals, QueueSample, WaitBucket
from ...errors import (
    JobDuplicateError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRemovableError,
    JobNotRequeueableError,
)
from .rows import MemoryRow, copy_step

if TYPE_CHECKING:
    from .driver import MemoryDriver


class MemoryOperatorStore:
    """``driver.operator`` for the memory driver. Shares the driver's lock, rows, registry and counters; holds
    the pauses and the task fires."""

    def __init__(self, driver: MemoryDriver) -> None:
        self._d = driver
        self.paused_queue_set: set[str] = set()
        self.paused_task_set: set[str] = set()  # read by the scheduler store's fire
        self.fires: dict[str, TaskFire] = {}  # written by the scheduler store's fire

    # -- reads ---------------------------------------------------------------------------------

    def _row(self, job_id: str) -> MemoryRow:
        row = self._d.rows.get(job_id)
        if row is None:
            raise JobNotFoundError(
                f"no queue holds job {job_id!r}. Fix: python manage.py jobs list --json", {"job_id": job_id}
            )
        return row

    def get(self, job_id: str) -> JobRecord | None:
        with self._d.lock:
            row = self._d.rows.get(job_id)
            return row.record() if row else None

    def steps(self, job_id: str) -> list[StepRecord]:
        with self._d.lock:
            row = self._d.rows.get(job_id)
            return [copy_step(s) for s in sorted(row.steps.values(), key=lambda s: s.seq)] if row else []

    def list(self, flt: JobFilter) -> JobPage:
        check_page(flt)
        column, descending = order_parts(flt.order)
        after = decode_cursor(flt.after, which="after", order=flt.order) if flt.after is not None else None
        before = decode_cursor(flt.before, which="before", order=flt.order) if flt.before is not None else None
        with self._d.lock:
            rows = [r for r in self._d.rows.values() if _matches(r, flt)]
            if column == "finished":  # a live row has no finish to sort by
                rows = [r for r in rows if r.finished_at_ms is not None]
            keyed = sorted(rows, key=lambda r: sort_key(r, column), reverse=descending)
            if after is not None:
                mark = after.key(column)
                page = [r for r in keyed if after_cursor(sort_key(r, column), mark, descending=descending)]
                page = page[: flt.limit]
            elif before is not None:
                mark = before.key(column)
                back = [
                    r for r in reversed(keyed) if after_cursor(sort_key(r, column), mark, descending=not descending)
                ]
                page = list(reversed(back[: flt.limit]))
            else:
                page = keyed[: flt.limit]
            return JobPage(rows=tuple(r.record() for r in page), limit=flt.limit)

    def count(self, flt: JobFilter) -> JobCount:
        with self._d.lock:  # the rows are in this process: counting them is always cheap
            matched = [r for r in self._d.rows.values() if _matches(r, flt)]
            if flt.order in ("finished", "-finished"):
                matched = [r for r in matched if r.finished_at_ms is not None]
            return JobCount(rows=len(matched), basis="count")

    # -- single-row operations -----------------------------------------------------------------

    def remove(self, job_id: str) -> None:
        with self._d.lock:
            row = self._row(job_id)
            if row.state == "running":
                raise JobNotRemovableError(
                    f"job {job_id} is running. Fix: python manage.py jobs cancel {job_id} --json", {"job_id": job_id}
                )
            self._d.delete(row)

    def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRecord:
        with self._d.lock:
            row = self._row(job_id)
            if row.state in LIVE_STATES:
                raise JobNotRequeueableError(
                    f"job {job_id} is {row.state}; only a finished job (done, failed, dead, cancelled) can be requeued",
                    {"job_id": job_id, "state": row.state},
                )
            holder = self._d.live.get(row.live_key)
            if holder is not None:
                raise JobDuplicateError(
                    f"job {job_id}'s idempotency key {row.idempotency_key!r} is held by live job {holder}",
                    {"job_id": job_id, "holder": holder},
                )
            if from_step is not None:
                cut = row.steps.get(from_step)
                if cut is None:
                    raise JobNotFoundError(
                        f"job {job_id} has no step {from_step!r}. Fix: python manage.py jobs show {job_id} --json",
                        {"job_id": job_id, "step": from_step},
                    )
                row.steps = {n: s for n, s in row.steps.items() if s.seq < cut.seq}
            self._reset(row)
            record = row.record()
        self._d.announce(record.queue)
        return record

    def _reset(self, row: MemoryRow) -> None:
        row.attempts = 0
        row.run_at_ms = self._d.clock.now_ms()
        row.progress = row.worker_id = None
        self._d.set_state(row, "ready")

    def cancel(self, job_id: str, reason: str | None = None) -> JobRecord | None:
        with self._d.lock:
            row = self._d.rows.get(job_id)
            if row is None or row.state not in LIVE_STATES:
                return None
            self._d.set_state(row, "cancelled")
            row.last_error, row.last_code = f"cancelled: {reason or 'by an operator'}", "X_JOB_CANCELLED"
            return row.record()

    def promote(self, job_id: str) -> JobRecord:
        with self._d.lock:
            row = self._row(job_id)
            now = self._d.clock.now_ms()
            if row.state not in PROMOTABLE_STATES or row.run_at_ms <= now:
                raise JobNotPromotableError(
                    f"job {job_id} is {row.state} and not waiting on its run time",
                    {"job_id": job_id, "state": row.state},
                )
            row.run_at_ms = now
            self._d.set_state(row, "ready")
            record = row.record()
        self._d.announce(record.queue)
        return record

    # -- bulk ----------------------------------------------------------------------------------

    def _select(self, flt: BulkFilter) -> builtins.list[MemoryRow]:
        rows = [
            r
            for r in self._d.rows.values()
            if r.state == flt.state
            and (flt.queue is None or r.queue == flt.queue)
            and (flt.name is None or r.name == flt.name)
            and (flt.tenant_id is None or r.tenant_id == flt.tenant_id)
        ]
        return sorted(rows, key=lambda r: (r.created_at_ms, r.id))

    def requeue_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state not in REQUEUEABLE_STATES:
            raise JobNotRequeueableError(
                f"requeue_many over {flt.state!r}: only finished states {REQUEUEABLE_STATES} can be requeued",
                {"state": flt.state},
            )
        moved: set[str] = set()
        affected = 0
        with self._d.lock:
            for row in self._select(flt):
                if affected >= MAX_BULK_ROWS:
                    break
                if row.live_key in self._d.live:
                    continue  # held by a live job, or by the older row this call just requeued
                self._reset(row)
                affected += 1
                moved.add(row.queue)
            remaining = len({r.live_key for r in self._select(flt) if r.live_key not in self._d.live})
        for queue in sorted(moved):
            self._d.announce(queue)
        return BulkResult(affected=affected, remaining=remaining)

    def remove_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state == "running":
            raise JobNotRemovableError(
                "remove_many cannot remove running jobs. Fix: python manage.py jobs cancel <id> --json",
                {"state": flt.state},
            )
        with self._d.lock:
            rows = self._select(flt)
            for row in rows[:MAX_BULK_ROWS]:
                self._d.delete(row)
            return BulkResult(affected=min(len(rows), MAX_BULK_ROWS), remaining=max(0, len(rows) - MAX_BULK_ROWS))

    def promote_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state not in PROMOTABLE_STATES:
            raise JobNotPromotableError(
                f"promote_many over {flt.state!r}: only {PROMOTABLE_STATES} rows wait on a run time",
                {"state": flt.state},
            )
        moved: set[str] = set()
        with self._d.lock:
            now = self._d.clock.now_ms()
            waiting = [r for r in self._select(flt) if r.run_at_ms > now]
            for row in waiting[:MAX_BULK_ROWS]:
                row.run_at_ms = now
                self._d.set_state(row, "ready")
                moved.add(row.queue)
            affected = min(len(waiting), MAX_BULK_ROWS)
        for queue in sorted(moved):
            self._d.announce(queue)
        return BulkResult(affected=affected, remaining=len(waiting) - affected)

    # -- pauses --------------------------------------------------------------------------------

    def pause_queue(self, queue: str) -> None:
        with self._d.lock:
            self.paused_queue_set.add(queue)

    def resume_queue(self, queue: str) -> None:
        with self._d.lock:
            self.paused_queue_set.discard(queue)
        self._d.announce(queue)

    def paused_queues(self) -> builtins.list[str]:
        with self._d.lock:
            return sorted(self.paused_queue_set)

    def pause_task(self, task: str) -> None:
        with self._d.lock:
            self.paused_task_set.add(task)

    def resume_task(self, task: str) -> None:
        with self._d.lock:
            self.paused_task_set.discard(task)

    def paused_tasks(self) -> builtins.list[str]:
        with self._d.lock:
            return sorted(self.paused_task_set)

    # -- workers -------------------------------------------------------------------------------

    def workers(self) -> builtins.list[WorkerInfo]:
        with self._d.lock:
            cutoff = self._d.clock.now_ms() - self._d.visibility_timeout_ms
            registry = self._d.registry
            for worker_id in [w.id for w in registry.values() if w.heartbeat_at_ms <= cutoff]:
                del registry[worker_id]
            return sorted(registry.values(), key=lambda w: (w.started_at_ms, w.id))

    # -- counters ------------------------------------------------------------------------------

    def counters(self, *, job: str, since_ms: int) -> builtins.list[CounterBucket]:
        with self._d.lock:
            return self._d.counters.of(job, since_ms)

    def counter_totals(self, since_ms: int) -> builtins.list[CounterTotals]:
        with self._d.lock:
            return self._d.counters.totals(since_ms)

    def counter_series(self, since_ms: int, width_ms: int) -> builtins.list[CounterBucket]:
        with self._d.lock:
            return self._d.counters.series(since_ms, width_ms)

    def queue_samples(self, since_ms: int, width_ms: int) -> builtins.list[QueueSample]:
        with self._d.lock:
            return self._d.counters.samples(since_ms, width_ms)

    def wait_series(self, since_ms: int, width_ms: int) -> builtins.list[WaitBucket]:
        with self._d.lock:
            return self._d.counters.waits(since_ms, width_ms)

    # -- task fires ----------------------------------------------------------------------------

    def task_fires(self) -> builtins.list[TaskFire]:
        with self._d.lock:
            return sorted(self.fires.values(), key=lambda f: f.task)[:MAX_TASK_FIRES]


def _matches(row: MemoryRow, flt: JobFilter) -> bool:
    return (
        (flt.queue is None or row.queue == flt.queue)
        and (flt.name is None or row.name == flt.name)
        and (flt.state is None or row.state == flt.state)
        and (flt.tenant_id is None or row.tenant_id == flt.tenant_id)
        and (flt.id_prefix is None or row.id.startswith(flt.id_prefix))
        and (flt.id_suffix is None or row.id.endswith(flt.id_suffix))
        and (flt.idempotency_key is None or row.idempotency_key == flt.idempotency_key)
        and (flt.created_from_ms is None or row.created_at_ms >= flt.created_from_ms)
        and (flt.created_to_ms is None or row.created_at_ms < flt.created_to_ms)
    )
