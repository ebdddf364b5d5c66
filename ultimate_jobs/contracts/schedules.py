"""The records of the scheduler (task fires, the leader's lease), the backfill ledger and the rate schedules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .jobs import EnqueueRequest

MAX_TASK_FIRES = 1_000


@dataclass(frozen=True, slots=True)
class RateState:
    """One rate key's schedule (``driver.rates.state()``): the next instant a start may take without
    waiting, and how many reserved instants runs that found the key busy are waiting for."""

    key: str
    next_at_ms: int
    reserved: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"key": self.key, "next_at_ms": self.next_at_ms, "reserved": self.reserved}


@dataclass(frozen=True, slots=True)
class TaskFire:
    """The last occurrence of a task that dispatched."""

    task: str
    occurrence_ms: int
    fired_at_ms: int


FireOutcome = Literal["fired", "paused", "fenced"]


@dataclass(frozen=True, slots=True)
class Fire:
    """One task occurrence to fire: the task's watermark moves from ``previous_ms`` (the value the firing
    scheduler read) to ``watermark_ms``, ``requests`` are enqueued and the fire is recorded — together, or
    nothing happens. ``now_ms`` is the scheduler's instant: the fire's record, the rows' creation time."""

    task: str
    previous_ms: int
    watermark_ms: int
    occurrence_ms: int
    requests: Sequence[EnqueueRequest]
    now_ms: int


@dataclass(frozen=True, slots=True)
class FireResult:
    """What a fire did: ``fired`` (``inserted`` rows; a request deduped by an id or a live key inserts
    none), ``paused`` (the task is paused) or ``fenced`` (the stored watermark is no longer the one the
    scheduler read: another scheduler fired first) — nothing written either way."""

    outcome: FireOutcome
    inserted: int = 0


@dataclass(frozen=True, slots=True)
class LeaderLease:
    """A leader lease as stored: ``holder`` leads election ``name`` until ``expires_at_ms`` (exclusive),
    in a term that started at ``acquired_at_ms`` (a renewal keeps it; a takeover starts a new one)."""

    name: str
    holder: str
    acquired_at_ms: int
    expires_at_ms: int


BackfillStatus = Literal["running", "completed", "failed"]
BACKFILL_STATUSES: tuple[BackfillStatus, ...] = ("running", "completed", "failed")


@dataclass(frozen=True, slots=True)
class BackfillRun:
    """One ``x_backfills`` row: one pass of a backfill, from its first attempt to its settle.

    ``run_id`` is the job run that owns the row (its retries adopt it, so ``started_at_ms`` is when the
    pass began); ``last_cursor`` is the primary key of the last row handled (JSON), a report and never
    where a resumed pass restarts."""

    id: str
    name: str
    tenant_id: str | None
    checksum: str
    status: BackfillStatus
    app_version: str | None
    rows_processed: int
    batches: int
    last_cursor: Any
    job_id: str
    run_id: str
    error_code: str | None
    started_at_ms: int
    updated_at_ms: int
    completed_at_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON (``--json``, the admin, the views): every column, times as epoch ms."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class BackfillBegin:
    """What a pass writes when it starts an attempt: the row of ``run_id``, adopted or inserted."""

    name: str
    tenant_id: str | None
    checksum: str
    app_version: str | None
    job_id: str
    run_id: str
    now_ms: int
