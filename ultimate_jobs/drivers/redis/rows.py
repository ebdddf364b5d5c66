"""Decoding what the Redis scripts answer (a row's ``HGETALL``) into the driver's records."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, cast

from ...contracts.jobs import ClaimedJob, EnqueueRequest, ExhaustedJob, JobState, Progress, StepRecord
from ...contracts.operator import JobRecord
from ...contracts.schedules import BackfillRun, BackfillStatus
from ...core.ids import new_id


def text(value: Any) -> Any:
    """``value`` with every ``bytes`` decoded (a client built without ``decode_responses``), recursively."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return [text(v) for v in value]
    if isinstance(value, dict):
        return {text(k): text(v) for k, v in value.items()}
    if isinstance(value, set):
        return {text(v) for v in value}
    return value


def pairs(flat: Sequence[str]) -> dict[str, str]:
    """An ``HGETALL`` reply (``[field, value, …]``) as a dict."""
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def _int(row: Mapping[str, str], field: str) -> int | None:
    value = row.get(field)
    return None if value is None else int(value)


def job_record(row: Mapping[str, str]) -> JobRecord:
    """A job hash as the operator surface sees it."""
    progress = row.get("progress")
    return JobRecord(
        id=row["id"],
        run_id=row["run_id"],
        name=row["name"],
        queue=row["queue"],
        state=cast(JobState, row["state"]),
        tenant_id=row.get("tenant"),
        idempotency_key=row["key"],
        attempts=int(row["attempts"]),
        max_attempts=int(row["max"]),
        priority=int(row["prio"]),
        run_at_ms=int(row["run_at"]),
        created_at_ms=int(row["created"]),
        updated_at_ms=int(row["updated"]),
        input=json.loads(row["input"]),
        last_error=row.get("err"),
        last_code=row.get("code"),
        finished_at_ms=_int(row, "finished"),
        worker_id=row.get("worker"),
        lease_until_ms=_int(row, "lease"),
        progress=None if progress is None else progress_from(progress),
        enqueued_by=row.get("by"),
        traceparent=row.get("tp"),
        concurrency_key=row.get("ck"),
    )


def claimed_job(row: Mapping[str, str], steps: Mapping[str, str]) -> ClaimedJob:
    """A claimed job hash, with its steps in seq order."""
    return ClaimedJob(
        id=row["id"],
        run_id=row["run_id"],
        name=row["name"],
        queue=row["queue"],
        tenant_id=row.get("tenant"),
        idempotency_key=row["key"],
        input=json.loads(row["input"]),
        attempt=int(row["attempts"]),
        max_attempts=int(row["max"]),
        priority=int(row["prio"]),
        run_at_ms=int(row["run_at"]),
        created_at_ms=int(row["created"]),
        worker_id=row["worker"],
        claim=row["claim"],
        lease_until_ms=int(row["lease"]),
        steps=tuple(steps_in_order(steps)),
        concurrency_key=row.get("ck"),
        enqueued_by=row.get("by"),
        traceparent=row.get("tp"),
    )


def exhausted_job(row: Mapping[str, str]) -> ExhaustedJob:
    """A row the claim buried."""
    return ExhaustedJob(
        id=row["id"],
        run_id=row["run_id"],
        name=row["name"],
        queue=row["queue"],
        tenant_id=row.get("tenant"),
        input=json.loads(row["input"]),
        attempt=int(row["attempts"]),
        state="failed" if row["state"] == "failed" else "dead",
    )


def step_json(step: StepRecord) -> str:
    """A step as stored: one JSON document per step name."""
    return json.dumps(
        {
            "name": step.name,
            "seq": step.seq,
            "status": step.status,
            "output": step.output,
            "started": step.started_at_ms,
            "finished": step.finished_at_ms,
            "wake": step.wake_at_ms,
            "meta": dict(step.meta),
        },
        separators=(",", ":"),
    )


def step_from(raw: str) -> StepRecord:
    """A stored step document as a record."""
    data = json.loads(raw)
    return StepRecord(
        name=data["name"],
        seq=data["seq"],
        status=data["status"],
        output=data["output"],
        started_at_ms=data["started"],
        finished_at_ms=data["finished"],
        wake_at_ms=data["wake"],
        meta=data["meta"],
    )


def steps_in_order(steps: Mapping[str, str]) -> list[StepRecord]:
    """Every stored step of a run, in seq order."""
    return sorted((step_from(raw) for raw in steps.values()), key=lambda s: s.seq)


def progress_json(progress: Progress) -> str:
    """``record_progress``'s document."""
    return json.dumps([progress.done, progress.total, progress.note, progress.at_ms], separators=(",", ":"))


def progress_from(raw: str) -> Progress:
    """A stored progress document as a record."""
    done, total, note, at_ms = json.loads(raw)
    return Progress(done=done, total=total, note=note, at_ms=at_ms)


def backfill_run(row: Mapping[str, str]) -> BackfillRun:
    """A backfill ledger hash as a record."""
    return BackfillRun(
        id=row["id"],
        name=row["name"],
        tenant_id=row.get("tenant"),
        checksum=row["checksum"],
        status=cast(BackfillStatus, row["status"]),
        app_version=row.get("app"),
        rows_processed=int(row["rows"]),
        batches=int(row["batches"]),
        last_cursor=json.loads(row["cursor"]),
        job_id=row["job"],
        run_id=row["run"],
        error_code=row.get("err"),
        started_at_ms=int(row["started"]),
        updated_at_ms=int(row["updated"]),
        completed_at_ms=_int(row, "completed"),
    )


def request_doc(request: EnqueueRequest) -> dict[str, Any]:
    """One enqueue request as the enqueue script reads it; ids are allocated here, so a retried call
    answers the rows it already inserted instead of inserting them twice."""
    return {
        "id": request.id or new_id(),
        "run_id": request.run_id or str(uuid.uuid4()),
        "name": request.name,
        "queue": request.queue,
        "tenant": request.tenant_id,
        "key": request.idempotency_key,
        "input": json.dumps(dict(request.input), separators=(",", ":")),
        "max": str(request.max_attempts),
        "prio": str(request.priority),
        "run_at": None if request.run_at_ms is None else str(request.run_at_ms),
        "on_conflict": request.on_conflict,
        "by": request.enqueued_by,
        "tp": request.traceparent,
        "ck": request.concurrency_key,
    }
