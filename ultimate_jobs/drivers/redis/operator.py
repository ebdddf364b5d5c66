"""The Redis driver's operator store (``OperatorStore``): every member a script or one read."""

from __future__ import annotations

import builtins
import json
import random
from typing import TYPE_CHECKING, Any, cast

from ...contracts.jobs import PROMOTABLE_STATES, REQUEUEABLE_STATES, StepRecord
from ...contracts.operator import (
    MAX_BULK_ROWS,
    MAX_WORKER_IN_FLIGHT,
    BulkFilter,
    BulkResult,
    JobFilter,
    JobPage,
    JobRecord,
    WorkerInfo,
    check_page,
)
from ...contracts.ordering import COUNT_CAP, CountBasis, Cursor, JobCount, decode_cursor, order_parts
from ...contracts.schedules import MAX_TASK_FIRES, TaskFire
from ...contracts.series import (
    COUNTER_VALUES,
    CounterBucket,
    CounterTotals,
    QueueSample,
    WaitBucket,
    counter_bucket,
    merged_samples,
)
from ...errors import (
    JobDuplicateError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRemovableError,
    JobNotRequeueableError,
)
from ..counters import summed_series, waits_of
from .rows import job_record, pairs, steps_in_order, text

if TYPE_CHECKING:
    from .driver import RedisDriver

COUNTER_FIELDS = ("done", "retried", "failed", "dead", "duration_ms")

COUNT_SAMPLE = 1_000
"""Entries a count over more than :data:`COUNT_CAP` candidates draws to estimate how many match."""


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(
        f"no queue holds job {job_id!r}. Fix: python manage.py jobs list --json", {"job_id": job_id}
    )


def _filter_doc(flt: JobFilter) -> dict[str, Any]:
    """``flt``'s filter terms and order as the list and count scripts read them (:mod:`.queries.listing`)."""
    column, descending = order_parts(flt.order)
    return {
        "queue": flt.queue,
        "name": flt.name,
        "state": flt.state,
        "tenant": flt.tenant_id,
        "prefix": flt.id_prefix or None,  # "" starts every id
        "suffix": flt.id_suffix or None,  # "" ends every id
        "key": flt.idempotency_key,
        "from": None if flt.created_from_ms is None else str(flt.created_from_ms),
        "to": None if flt.created_to_ms is None else str(flt.created_to_ms),
        "col": column,
        "desc": descending,
        "fin": column == "finished",  # a live row has no finish to sort by
    }


def _mark(cursor: Cursor | None) -> list[str] | None:
    """A decoded cursor as the list script reads it: ``[value, created, id]``, value ``""`` sorted by creation."""
    if cursor is None:
        return None
    return ["" if cursor.value is None else str(cursor.value), str(cursor.created_at_ms), cursor.id]


def _bulk_doc(flt: BulkFilter) -> str:
    return json.dumps({"state": flt.state, "queue": flt.queue, "name": flt.name, "tenant": flt.tenant_id})


class RedisOperatorStore:
    """``driver.operator`` for the Redis driver."""

    def __init__(self, driver: RedisDriver) -> None:
        self._d = driver

    def _read(self, fn: Any) -> Any:
        with self._d.unavailable():
            return text(fn(self._d.client))

    # -- reads ---------------------------------------------------------------------------------

    def get(self, job_id: str) -> JobRecord | None:
        row = self._read(lambda c: c.hgetall(self._d.key("job", job_id)))
        return job_record(row) if row else None

    def steps(self, job_id: str) -> list[StepRecord]:
        return steps_in_order(self._read(lambda c: c.hgetall(self._d.key("steps", job_id))))

    def list(self, flt: JobFilter) -> JobPage:
        check_page(flt)
        after = decode_cursor(flt.after, which="after", order=flt.order) if flt.after is not None else None
        before = decode_cursor(flt.before, which="before", order=flt.order) if flt.before is not None else None
        doc = _filter_doc(flt) | {"limit": str(flt.limit), "after": _mark(after), "before": _mark(before)}
        _, rows, cut = self._d.run("list", json.dumps(doc), str(COUNT_CAP))
        window = COUNT_CAP if int(cut) else None
        return JobPage(rows=tuple(job_record(pairs(r)) for r in rows), limit=flt.limit, window=window)

    def count(self, flt: JobFilter) -> JobCount:
        seed = random.randrange(1, 2**31 - 1)  # the sample's draws; the script draws nothing itself
        doc = json.dumps(_filter_doc(flt))
        rows, basis = self._d.run("count", doc, str(COUNT_CAP), str(COUNT_SAMPLE), str(seed))
        if rows == "":
            return JobCount(rows=None, basis=None)
        return JobCount(rows=int(rows), basis=cast(CountBasis, basis))

    # -- single-row operations -----------------------------------------------------------------

    def remove(self, job_id: str) -> None:
        answer = self._d.run("remove", job_id)
        if answer == "nf":
            raise _not_found(job_id)
        if answer == "running":
            raise JobNotRemovableError(
                f"job {job_id} is running. Fix: python manage.py jobs cancel {job_id} --json", {"job_id": job_id}
            )

    def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRecord:
        now = str(self._d.clock.now_ms())
        answer = self._d.run("requeue", job_id, now, from_step if from_step is not None else "")
        status = answer[0]
        if status == "nf":
            raise _not_found(job_id)
        if status == "live":
            raise JobNotRequeueableError(
                f"job {job_id} is {answer[1]}; only a finished job (done, failed, dead, cancelled) can be requeued",
                {"job_id": job_id, "state": answer[1]},
            )
        if status == "dup":
            raise JobDuplicateError(
                f"job {job_id}'s idempotency key is held by live job {answer[1]}",
                {"job_id": job_id, "holder": answer[1]},
            )
        if status == "nostep":
            raise JobNotFoundError(
                f"job {job_id} has no step {from_step!r}. Fix: python manage.py jobs show {job_id} --json",
                {"job_id": job_id, "step": from_step},
            )
        return job_record(pairs(answer[1]))

    def cancel(self, job_id: str, reason: str | None = None) -> JobRecord | None:
        now = str(self._d.clock.now_ms())
        row = self._d.run("cancel", job_id, now, f"cancelled: {reason or 'by an operator'}")
        return job_record(pairs(row)) if row else None

    def promote(self, job_id: str) -> JobRecord:
        answer = self._d.run("promote", job_id, str(self._d.clock.now_ms()))
        if answer[0] == "nf":
            raise _not_found(job_id)
        if answer[0] == "np":
            raise JobNotPromotableError(
                f"job {job_id} is {answer[1]} and not waiting on its run time", {"job_id": job_id, "state": answer[1]}
            )
        return job_record(pairs(answer[1]))

    # -- bulk ----------------------------------------------------------------------------------

    def requeue_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state not in REQUEUEABLE_STATES:
            raise JobNotRequeueableError(
                f"requeue_many over {flt.state!r}: only finished states {REQUEUEABLE_STATES} can be requeued",
                {"state": flt.state},
            )
        affected, remaining = self._d.run(
            "requeue_many", _bulk_doc(flt), str(self._d.clock.now_ms()), str(MAX_BULK_ROWS)
        )
        return BulkResult(affected=int(affected), remaining=int(remaining))

    def remove_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state == "running":
            raise JobNotRemovableError(
                "remove_many cannot remove running jobs. Fix: python manage.py jobs cancel <id> --json",
                {"state": flt.state},
            )
        affected, remaining = self._d.run("remove_many", _bulk_doc(flt), str(MAX_BULK_ROWS))
        return BulkResult(affected=int(affected), remaining=int(remaining))

    def promote_many(self, flt: BulkFilter) -> BulkResult:
        if flt.state not in PROMOTABLE_STATES:
            raise JobNotPromotableError(
                f"promote_many over {flt.state!r}: only {PROMOTABLE_STATES} rows wait on a run time",
                {"state": flt.state},
            )
        affected, remaining = self._d.run(
            "promote_many", _bulk_doc(flt), str(self._d.clock.now_ms()), str(MAX_BULK_ROWS)
        )
        return BulkResult(affected=int(affected), remaining=int(remaining))

    # -- pauses --------------------------------------------------------------------------------

    def pause_queue(self, queue: str) -> None:
        self._read(lambda c: c.sadd(self._d.key("paused", "queues"), queue))

    def resume_queue(self, queue: str) -> None:
        self._d.run("resume_queue", queue)

    def paused_queues(self) -> builtins.list[str]:
        return sorted(self._read(lambda c: c.smembers(self._d.key("paused", "queues"))))

    def pause_task(self, task: str) -> None:
        self._read(lambda c: c.sadd(self._d.key("paused", "tasks"), task))

    def resume_task(self, task: str) -> None:
        self._read(lambda c: c.srem(self._d.key("paused", "tasks"), task))

    def paused_tasks(self) -> builtins.list[str]:
        return sorted(self._read(lambda c: c.smembers(self._d.key("paused", "tasks"))))

    # -- workers -------------------------------------------------------------------------------

    def workers(self) -> builtins.list[WorkerInfo]:
        stored = self._read(lambda c: c.hgetall(self._d.key("workers")))
        cutoff = self._d.clock.now_ms() - self._d.visibility_timeout_ms
        live: builtins.list[WorkerInfo] = []
        stale: builtins.list[str] = []
        for worker_id, raw in stored.items():
            data = json.loads(raw)
            if data["heartbeat"] <= cutoff:
                stale.append(worker_id)
                continue
            live.append(
                WorkerInfo(
                    id=data["id"],
                    host=data["host"],
                    pid=data["pid"],
                    started_at_ms=data["started"],
                    queues=tuple(data["queues"]),
                    slots=data["slots"],
                    in_flight=tuple(data["in_flight"][:MAX_WORKER_IN_FLIGHT]),
                    heartbeat_at_ms=data["heartbeat"],
                )
            )
        if stale:
            self._read(lambda c: c.hdel(self._d.key("workers"), *stale))
        return sorted(live, key=lambda w: (w.started_at_ms, w.id))

    # -- counters ------------------------------------------------------------------------------

    def _buckets(self) -> dict[tuple[str, int, int], builtins.list[int]]:
        flat = self._read(lambda c: c.hgetall(self._d.key("counters")))
        buckets: dict[tuple[str, int, int], builtins.list[int]] = {}
        for field, value in flat.items():
            width, start, index, job = field.split(":", 3)
            values = buckets.setdefault((job, int(width), int(start)), [0] * COUNTER_VALUES)
            values[int(index)] += int(value)
        return buckets

    def counters(self, *, job: str, since_ms: int) -> builtins.list[CounterBucket]:
        return sorted(
            (
                counter_bucket(name, start, width, values)
                for (name, width, start), values in self._buckets().items()
                if name == job and start + width > since_ms
            ),
            key=lambda b: (b.bucket_ms, b.width_ms),
        )

    def counter_totals(self, since_ms: int) -> builtins.list[CounterTotals]:
        totals: dict[str, builtins.list[int]] = {}
        for (name, width, start), values in self._buckets().items():
            if start + width > since_ms:
                into = totals.setdefault(name, [0, 0, 0, 0, 0])
                for i, value in enumerate(values[:5]):
                    into[i] += value
        return [CounterTotals(name, *values) for name, values in sorted(totals.items())]

    def counter_series(self, since_ms: int, width_ms: int) -> builtins.list[CounterBucket]:
        return summed_series(self._buckets(), since_ms, width_ms)

    def queue_samples(self, since_ms: int, width_ms: int) -> builtins.list[QueueSample]:
        samples = []
        for field, value in self._read(lambda c: c.hgetall(self._d.key("samples"))).items():
            bucket, queue = field.split(":", 1)
            depth, age = value.split(":", 1)
            if int(bucket) >= since_ms:
                samples.append(QueueSample(queue, int(bucket), int(depth), int(age) if age else None))
        return merged_samples(samples, width_ms)

    def wait_series(self, since_ms: int, width_ms: int) -> builtins.list[WaitBucket]:
        flat = self._read(lambda c: c.hgetall(self._d.key("waits")))
        bins = []
        for field, value in flat.items():
            width, start, index, queue = field.split(":", 3)
            if int(start) + int(width) > since_ms:
                bins.append((queue, int(start), int(width), int(index), int(value)))
        return waits_of(bins, width_ms)

    # -- task fires ----------------------------------------------------------------------------

    def task_fires(self) -> builtins.list[TaskFire]:
        stored = self._read(lambda c: c.hgetall(self._d.key("fires")))
        fires = []
        for task, value in stored.items():
            occurrence, fired = value.rsplit(":", 1)
            fires.append(TaskFire(task, int(occurrence), int(fired)))
        return sorted(fires, key=lambda f: f.task)[:MAX_TASK_FIRES]
