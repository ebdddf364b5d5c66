"""Row ↔ record conversions shared by the driver, its introspection and its scheduler storage: one column
list, one reader, one writer of request rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...ids import new_id
from ..base import MAX_WORKER_IN_FLIGHT, ClaimedJob, EnqueueRequest, JobRecord, Progress, StepRecord, WorkerInfo
from .executor import from_jsonb, jsonb


def job_record(row: Sequence[Any]) -> JobRecord:
    """A :class:`JobRecord` from a row selected with :data:`JOB_COLUMNS`."""
    progress = from_jsonb(row[20])
    return JobRecord(
        id=str(row[0]),
        run_id=str(row[1]),
        name=row[2],
        queue=row[3],
        state=row[4],
        tenant_id=row[5],
        idempotency_key=row[6],
        attempts=row[7],
        max_attempts=row[8],
        priority=row[9],
        run_at_ms=row[10],
        created_at_ms=row[11],
        updated_at_ms=row[12],
        input=from_jsonb(row[13]),
        last_error=row[14],
        last_code=row[15],
        finished_at_ms=row[16],
        worker_id=row[17],
        lease_until_ms=row[19],
        progress=Progress(**progress) if progress else None,
        enqueued_by=row[21],
        traceparent=row[22],
        concurrency_key=row[23],
    )


def claimed_job(row: Sequence[Any], steps: tuple[StepRecord, ...]) -> ClaimedJob:
    """A :class:`ClaimedJob` from a row selected with :data:`JOB_COLUMNS` (claim fields set)."""
    record = job_record(row)
    assert record.worker_id is not None and record.lease_until_ms is not None
    return ClaimedJob(
        id=record.id,
        run_id=record.run_id,
        name=record.name,
        queue=record.queue,
        tenant_id=record.tenant_id,
        idempotency_key=record.idempotency_key,
        input=record.input,
        attempt=record.attempts,
        max_attempts=record.max_attempts,
        priority=record.priority,
        run_at_ms=record.run_at_ms,
        created_at_ms=record.created_at_ms,
        worker_id=record.worker_id,
        claim=str(row[18]),
        lease_until_ms=record.lease_until_ms,
        steps=steps,
        concurrency_key=record.concurrency_key,
        enqueued_by=record.enqueued_by,
        traceparent=record.traceparent,
    )


def step_record(row: Sequence[Any]) -> StepRecord:
    """A :class:`StepRecord` from a row selected with :data:`STEP_COLUMNS`."""
    return StepRecord(
        name=row[0],
        seq=row[1],
        status=row[2],
        output=from_jsonb(row[3]),
        started_at_ms=row[4],
        finished_at_ms=row[5],
        wake_at_ms=row[6],
        meta=from_jsonb(row[7]) or {},
    )


def worker_row(info: WorkerInfo) -> dict[str, Any]:
    """The parameters of RECORD_WORKER_UPSERT for ``info`` (in_flight truncated to MAX_WORKER_IN_FLIGHT ids)."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "started": info.started_at_ms,
        "queues": jsonb(list(info.queues)),
        "slots": info.slots,
        "in_flight": jsonb(list(info.in_flight[:MAX_WORKER_IN_FLIGHT])),
        "heartbeat": info.heartbeat_at_ms,
    }


def enqueue_rows(requests: Sequence[EnqueueRequest]) -> list[dict[str, Any]]:
    """The request rows ENQUEUE_RECORDSET reads, in order, ids minted here when the caller named none."""
    return [
        {
            "ord": i,
            "id": r.id or new_id(),
            "run_id": r.run_id or new_id(),
            "name": r.name,
            "queue": r.queue,
            "tenant_id": r.tenant_id,
            "idempotency_key": r.idempotency_key,
            "input": dict(r.input),
            "max_attempts": r.max_attempts,
            "priority": r.priority,
            "run_at_ms": r.run_at_ms,
            "enqueued_by": r.enqueued_by,
            "traceparent": r.traceparent,
            "concurrency_key": r.concurrency_key,
        }
        for i, r in enumerate(requests)
    ]
