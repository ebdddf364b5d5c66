"""Rows ↔ records for both SQL backends, read by column name.

Each kind of row is a named tuple over the column names its statements select (every catalogue aliases
its columns to these names, and a test holds each statement's ``cursor.description`` to them). Naming a
row costs one tuple per row; each field then reads by name through an index fixed once per class, so the
decoders below never count positions. The values are converted by the :class:`~.dialect.Dialect`.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from ...contracts.jobs import ClaimedJob, ExhaustedJob, Progress, StepRecord
from ...contracts.operator import MAX_WORKER_IN_FLIGHT, JobRecord, WorkerInfo
from ...contracts.schedules import BackfillRun, LeaderLease
from .dialect import Dialect, dumps


def row_class(name: str, fields: Sequence[str]) -> Any:
    """A named row class over ``fields``: ``row_class(...)._make(row)`` names a row in one tuple."""
    return namedtuple(name, fields)


JOB_FIELDS = (
    "id", "run_id", "name", "queue", "state", "tenant_id", "idempotency_key", "attempts", "max_attempts",
    "priority", "run_at", "created_at", "updated_at", "input", "last_error", "last_code", "finished_at",
    "worker_id", "claim", "lease_until", "progress", "enqueued_by", "traceparent", "concurrency_key",
)  # fmt: skip
STEP_FIELDS = ("name", "seq", "status", "output", "started_at", "finished_at", "wake_at", "meta")
WORKER_FIELDS = ("id", "host", "pid", "started_at", "queues", "slots", "in_flight", "heartbeat_at")
BACKFILL_FIELDS = (
    "id", "name", "tenant_id", "checksum", "status", "app_version", "rows_processed", "batches", "last_cursor",
    "job_id", "run_id", "error_code", "started_at", "updated_at", "completed_at",
)  # fmt: skip
LEASE_FIELDS = ("name", "holder", "acquired_at", "expires_at")

JobRow = row_class("JobRow", JOB_FIELDS)
StepRow = row_class("StepRow", STEP_FIELDS)
WorkerRow = row_class("WorkerRow", WORKER_FIELDS)
BackfillRow = row_class("BackfillRow", BACKFILL_FIELDS)
LeaseRow = row_class("LeaseRow", LEASE_FIELDS)
ClaimRow = row_class("ClaimRow", ("kind", *JOB_FIELDS, "steps"))
"""A row of a one-statement claim (Postgres): ``kind`` is 'claimed' or 'buried', ``steps`` a claimed row's
completed steps as a JSON array of arrays in :data:`STEP_FIELDS` order."""


def job_record(row: Any, d: Dialect) -> JobRecord:
    """A :class:`JobRecord` from a row with the :data:`JOB_FIELDS` (a :class:`JobRow`, or any row naming them)."""
    progress = d.json(row.progress)
    return JobRecord(
        id=d.uid(row.id),
        run_id=d.uid(row.run_id),
        name=row.name,
        queue=row.queue,
        state=row.state,
        tenant_id=row.tenant_id,
        idempotency_key=row.idempotency_key,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        priority=row.priority,
        run_at_ms=d.instant(row.run_at),
        created_at_ms=d.instant(row.created_at),
        updated_at_ms=d.instant(row.updated_at),
        input=d.json(row.input),
        last_error=row.last_error,
        last_code=row.last_code,
        finished_at_ms=d.instant_or_none(row.finished_at),
        worker_id=row.worker_id,
        lease_until_ms=d.instant_or_none(row.lease_until),
        progress=Progress(**progress) if progress else None,
        enqueued_by=row.enqueued_by,
        traceparent=row.traceparent,
        concurrency_key=row.concurrency_key,
    )


def claimed_job(row: Any, steps: tuple[StepRecord, ...], d: Dialect) -> ClaimedJob:
    """A :class:`ClaimedJob` from a claimed row with the :data:`JOB_FIELDS`: only the columns a run reads are
    converted (every claimed row passes through here; the operator's columns — progress, errors, finished
    and updated times — are :func:`job_record`'s)."""
    lease_until_ms = d.instant_or_none(row.lease_until)
    assert row.worker_id is not None and lease_until_ms is not None
    return ClaimedJob(
        id=d.uid(row.id),
        run_id=d.uid(row.run_id),
        name=row.name,
        queue=row.queue,
        tenant_id=row.tenant_id,
        idempotency_key=row.idempotency_key,
        input=d.json(row.input),
        attempt=row.attempts,
        max_attempts=row.max_attempts,
        priority=row.priority,
        run_at_ms=d.instant(row.run_at),
        created_at_ms=d.instant(row.created_at),
        worker_id=row.worker_id,
        claim=d.uid(row.claim),
        lease_until_ms=lease_until_ms,
        steps=steps,
        concurrency_key=row.concurrency_key,
        enqueued_by=row.enqueued_by,
        traceparent=row.traceparent,
    )


def exhausted_job(row: Any, d: Dialect) -> ExhaustedJob:
    """An :class:`ExhaustedJob` from a row a claim buried (a lapsed final attempt), with the :data:`JOB_FIELDS`."""
    return ExhaustedJob(
        id=d.uid(row.id),
        run_id=d.uid(row.run_id),
        name=row.name,
        queue=row.queue,
        tenant_id=row.tenant_id,
        input=d.json(row.input),
        attempt=row.attempts,
        state="failed" if row.state == "failed" else "dead",
    )


def step_record(row: Any, d: Dialect) -> StepRecord:
    """A :class:`StepRecord` from a row with the :data:`STEP_FIELDS`."""
    return StepRecord(
        name=row.name,
        seq=row.seq,
        status=row.status,
        output=d.json(row.output),
        started_at_ms=d.instant(row.started_at),
        finished_at_ms=d.instant_or_none(row.finished_at),
        wake_at_ms=d.instant_or_none(row.wake_at),
        meta=d.json(row.meta) or {},
    )


def worker_info(row: Any, d: Dialect) -> WorkerInfo:
    """A :class:`WorkerInfo` from a registry row with the :data:`WORKER_FIELDS`."""
    return WorkerInfo(
        id=row.id,
        host=row.host,
        pid=row.pid,
        started_at_ms=d.instant(row.started_at),
        queues=tuple(d.json(row.queues)),
        slots=row.slots,
        in_flight=tuple(d.json(row.in_flight)),
        heartbeat_at_ms=d.instant(row.heartbeat_at),
    )


def worker_params(info: WorkerInfo, d: Dialect) -> dict[str, Any]:
    """The parameters of ``SQL_RECORD_WORKER`` for ``info`` (in_flight truncated to MAX_WORKER_IN_FLIGHT ids)."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "started": d.at(info.started_at_ms),
        "queues": dumps(list(info.queues)),
        "slots": info.slots,
        "in_flight": dumps(list(info.in_flight[:MAX_WORKER_IN_FLIGHT])),
        "heartbeat": d.at(info.heartbeat_at_ms),
    }


def backfill_run(row: Any, d: Dialect) -> BackfillRun:
    """A :class:`BackfillRun` from a ledger row with the :data:`BACKFILL_FIELDS`."""
    return BackfillRun(
        id=d.uid(row.id),
        name=row.name,
        tenant_id=row.tenant_id,
        checksum=row.checksum,
        status=row.status,
        app_version=row.app_version,
        rows_processed=int(row.rows_processed),
        batches=int(row.batches),
        last_cursor=d.json(row.last_cursor),
        job_id="" if row.job_id is None else d.uid(row.job_id),
        run_id="" if row.run_id is None else d.uid(row.run_id),
        error_code=row.error_code,
        started_at_ms=d.instant(row.started_at),
        updated_at_ms=d.instant(row.updated_at),
        completed_at_ms=d.instant_or_none(row.completed_at),
    )


def leader_lease(row: Any, d: Dialect) -> LeaderLease:
    """A :class:`LeaderLease` from a lease row with the :data:`LEASE_FIELDS`."""
    return LeaderLease(
        name=row.name,
        holder=row.holder,
        acquired_at_ms=d.instant(row.acquired_at),
        expires_at_ms=d.instant(row.expires_at),
    )
