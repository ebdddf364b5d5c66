"""Values between the driver's records and SQLite's columns, as Django's SQLite backend stores them.

The tables are the models' (one set of migrations for every database), so the driver writes what the ORM
writes: an instant is UTC text ``YYYY-MM-DD HH:MM:SS.ffffff`` (fixed width, so text order is time order),
a uuid is 32 lowercase hex digits, JSON is its text. Statements take and answer these; the conversions
to epoch ms, dashed ids and Python values happen here, once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..base import MAX_WORKER_IN_FLIGHT, ClaimedJob, JobRecord, Progress, StepRecord, WorkerInfo

EPOCH = datetime(1970, 1, 1)
ONE_MS = timedelta(milliseconds=1)


def ts(ms: int) -> str:
    """Epoch ms as the column text of an instant."""
    return (EPOCH + timedelta(milliseconds=ms)).isoformat(" ", "microseconds")


def ts_or_none(ms: int | None) -> str | None:
    return None if ms is None else ts(ms)


def ms(value: Any) -> int:
    """An instant column (text, or the datetime Django's converter made of it) as epoch ms."""
    if not isinstance(value, datetime):
        value = datetime.fromisoformat(value)
    offset = value.utcoffset()
    if offset is not None:
        value = value.replace(tzinfo=None) - offset
    return int((value - EPOCH) // ONE_MS)


def ms_or_none(value: Any) -> int | None:
    return None if value is None else ms(value)


def hex_id(value: str) -> str | None:
    """A job id (any spelling ``uuid.UUID`` reads) as its column text, or ``None`` when it names no row."""
    try:
        return uuid.UUID(value).hex
    except (ValueError, TypeError, AttributeError):
        return None


def dashed(value: str) -> str:
    """A uuid column's text as the canonical dashed id the records hold."""
    if len(value) != 32:
        return str(uuid.UUID(value))
    return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"


def dashed_or_none(value: str | None) -> str | None:
    return None if value is None else dashed(value)


def dumps(value: Any) -> str:
    """A value as a JSON column's text."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def job_record(row: Sequence[Any]) -> JobRecord:
    """A :class:`JobRecord` from a row selected with :data:`JOB_COLUMNS`."""
    progress = loads(row[20])
    return JobRecord(
        id=dashed(row[0]),
        run_id=dashed(row[1]),
        name=row[2],
        queue=row[3],
        state=row[4],
        tenant_id=row[5],
        idempotency_key=row[6],
        attempts=row[7],
        max_attempts=row[8],
        priority=row[9],
        run_at_ms=ms(row[10]),
        created_at_ms=ms(row[11]),
        updated_at_ms=ms(row[12]),
        input=loads(row[13]),
        last_error=row[14],
        last_code=row[15],
        finished_at_ms=ms_or_none(row[16]),
        worker_id=row[17],
        lease_until_ms=ms_or_none(row[19]),
        progress=Progress(**progress) if progress else None,
        enqueued_by=row[21],
        traceparent=row[22],
        concurrency_key=row[23],
    )


def claimed_job(row: Sequence[Any], steps: tuple[StepRecord, ...]) -> ClaimedJob:
    """A :class:`ClaimedJob` from a claimed row selected with :data:`JOB_COLUMNS`."""
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
        claim=dashed(row[18]),
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
        output=loads(row[3]),
        started_at_ms=ms(row[4]),
        finished_at_ms=ms_or_none(row[5]),
        wake_at_ms=ms_or_none(row[6]),
        meta=loads(row[7]) or {},
    )


def worker_params(info: WorkerInfo) -> dict[str, Any]:
    """The parameters of SQL_RECORD_WORKER for ``info`` (in_flight truncated to MAX_WORKER_IN_FLIGHT ids)."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "started": ts(info.started_at_ms),
        "queues": dumps(list(info.queues)),
        "slots": info.slots,
        "in_flight": dumps(list(info.in_flight[:MAX_WORKER_IN_FLIGHT])),
        "heartbeat": ts(info.heartbeat_at_ms),
    }


def worker_info(row: Sequence[Any]) -> WorkerInfo:
    worker_id, host, pid, started, queues, slots, in_flight, beat = row
    return WorkerInfo(
        id=worker_id,
        host=host,
        pid=pid,
        started_at_ms=ms(started),
        queues=tuple(loads(queues)),
        slots=slots,
        in_flight=tuple(loads(in_flight)),
        heartbeat_at_ms=ms(beat),
    )
