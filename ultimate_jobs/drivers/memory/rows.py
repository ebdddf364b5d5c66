"""The memory driver's rows: the one mutable job row it keeps per job, and how a record leaves it.

Where a SQL backend decodes cursor rows into the shared records, the memory backend projects its own
rows; every projection copies, so what a caller holds never aliases what is stored — as with a database.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from ...contracts.jobs import ClaimRef, JobState, Progress, StepRecord
from ...contracts.operator import JobRecord


@dataclass(slots=True)
class MemoryRow:
    """One mutable job row (private to the memory driver)."""

    id: str
    run_id: str
    name: str
    queue: str
    tenant_id: str | None
    idempotency_key: str
    input: dict[str, Any]
    max_attempts: int
    priority: int
    run_at_ms: int
    created_at_ms: int
    updated_at_ms: int
    state: JobState
    attempts: int = 0
    seq: int = 0
    stamp: int = 0  # the claim index's version of this row: entries under another stamp are stale
    worker_id: str | None = None
    claim: str | None = None
    lease_until_ms: int | None = None
    last_error: str | None = None
    last_code: str | None = None
    finished_at_ms: int | None = None
    progress: Progress | None = None
    enqueued_by: str | None = None
    traceparent: str | None = None
    concurrency_key: str | None = None
    lane: str | None = None  # its lane when its queue is fair (the tenant, "" for none), else None
    steps: dict[str, StepRecord] = field(default_factory=dict)

    @property
    def live_key(self) -> tuple[str, str, str]:
        return (self.name, self.tenant_id or "", self.idempotency_key)

    def owned_by(self, ref: ClaimRef) -> bool:
        return self.state == "running" and self.worker_id == ref.worker_id and self.claim == ref.claim

    def record(self) -> JobRecord:
        return JobRecord(
            id=self.id,
            run_id=self.run_id,
            name=self.name,
            queue=self.queue,
            state=self.state,
            tenant_id=self.tenant_id,
            idempotency_key=self.idempotency_key,
            attempts=self.attempts,
            max_attempts=self.max_attempts,
            priority=self.priority,
            run_at_ms=self.run_at_ms,
            created_at_ms=self.created_at_ms,
            updated_at_ms=self.updated_at_ms,
            input=copy.deepcopy(self.input),
            last_error=self.last_error,
            last_code=self.last_code,
            finished_at_ms=self.finished_at_ms,
            worker_id=self.worker_id,
            lease_until_ms=self.lease_until_ms,
            progress=self.progress,
            enqueued_by=self.enqueued_by,
            traceparent=self.traceparent,
            concurrency_key=self.concurrency_key,
        )


def copy_step(step: StepRecord) -> StepRecord:
    """A step record sharing no mutable object with ``step``: what is stored is what was saved, as in a database."""
    return replace(step, output=copy.deepcopy(step.output), meta=copy.deepcopy(dict(step.meta)))
