"""What the operator surface answers: frozen records, each with ``as_dict()`` — the stable ``--json``
shape the CLI prints, the admin renders and the JSON views serve.

Times are epoch milliseconds (``*_ms``); a job's ``input`` is always the redacted one
(:mod:`ultimate_jobs.guards.redaction`). A key is never dropped from a shape: an absent value is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..contracts.jobs import JobState, Progress
from ..contracts.ordering import DEFAULT_JOB_ORDER, JobOrder
from ..core.definition import JobDescriptor
from ..scheduler.task import TaskDescriptor

if TYPE_CHECKING:  # operator.backfills imports _support, which imports this module
    from .backfills import BackfillRow

BulkAction = Literal["requeue-many", "remove-many", "promote-many"]
JobActionName = Literal["retry", "cancel", "remove", "promote"]


def progress_dict(progress: Progress | None) -> dict[str, Any] | None:
    """A run's last progress as JSON: ``{"done", "total", "note", "at_ms"}``."""
    if progress is None:
        return None
    return {"done": progress.done, "total": progress.total, "note": progress.note, "at_ms": progress.at_ms}


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job as ``jobs list`` shows it: the row, its input redacted, its last error's first line."""

    id: str
    run_id: str
    name: str
    queue: str
    state: JobState
    tenant_id: str | None
    idempotency_key: str
    attempts: int
    max_attempts: int
    priority: int
    run_at_ms: int
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None
    input: Any
    last_code: str | None
    last_error: str | None
    progress: Progress | None
    worker_id: str | None
    lease_until_ms: int | None
    enqueued_by: str | None
    traceparent: str | None
    concurrency_key: str | None

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one row."""
        return {
            "id": self.id,
            "run_id": self.run_id,
            "name": self.name,
            "queue": self.queue,
            "state": self.state,
            "tenant_id": self.tenant_id,
            "idempotency_key": self.idempotency_key,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "priority": self.priority,
            "run_at_ms": self.run_at_ms,
            "created_at_ms": self.created_at_ms,
            "updated_at_ms": self.updated_at_ms,
            "finished_at_ms": self.finished_at_ms,
            "input": self.input,
            "last_code": self.last_code,
            "last_error": self.last_error,
            "progress": progress_dict(self.progress),
            "worker_id": self.worker_id,
            "lease_until_ms": self.lease_until_ms,
            "enqueued_by": self.enqueued_by,
            "traceparent": self.traceparent,
            "concurrency_key": self.concurrency_key,
        }


@dataclass(frozen=True, slots=True)
class JobPageView:
    """One page of ``list``, in ``order`` (newest first by default), with the cursors of the pages beside it.

    ``next`` pages on (pass it as ``after``), ``previous`` back (``before``); either is ``None`` when this
    page is known to be the last in that direction. ``window`` is set when the page was sorted among the
    ``window`` newest matching rows and more rows match (a sort by another column than creation).
    """

    rows: tuple[JobRow, ...]
    limit: int
    next: str | None
    previous: str | None
    order: JobOrder = DEFAULT_JOB_ORDER
    window: int | None = None

    @property
    def is_last(self) -> bool:
        """True when no older page exists (a page shorter than its limit)."""
        return self.next is None

    def as_dict(self) -> dict[str, Any]:
        """``{"rows", "limit", "next", "previous", "order", "window"}``."""
        return {
            "rows": [r.as_dict() for r in self.rows],
            "limit": self.limit,
            "next": self.next,
            "previous": self.previous,
            "order": self.order,
            "window": self.window,
        }


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step of a run's trace, in the order the steps started."""

    name: str
    seq: int
    status: str
    started_at_ms: int
    finished_at_ms: int | None
    wake_at_ms: int | None
    output: Any
    meta: Mapping[str, Any]

    @property
    def duration_ms(self) -> int | None:
        """How long the step ran (``None`` while it sleeps or waits)."""
        return None if self.finished_at_ms is None else self.finished_at_ms - self.started_at_ms

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one step."""
        return {
            "name": self.name,
            "seq": self.seq,
            "status": self.status,
            "started_at_ms": self.started_at_ms,
            "finished_at_ms": self.finished_at_ms,
            "duration_ms": self.duration_ms,
            "wake_at_ms": self.wake_at_ms,
            "output": self.output,
            "meta": dict(self.meta),
        }


@dataclass(frozen=True, slots=True)
class ErrorDetail:
    """Why the last attempt stopped: its code, the first line, and the rest (the stack, then the
    verdict a terminal dead letter appends)."""

    code: str | None
    message: str
    stack: str | None

    def as_dict(self) -> dict[str, Any]:
        """``{"code", "message", "stack"}``."""
        return {"code": self.code, "message": self.message, "stack": self.stack}


@dataclass(frozen=True, slots=True)
class JobDetail:
    """``jobs show``: the row, the per-step trace, the failure, the last progress, and ``backfill``: the
    ledger row of a backfill's pass run by this job (``None`` for any other job)."""

    job: JobRow
    steps: tuple[StepRow, ...]
    error: ErrorDetail | None
    backfill: BackfillRow | None = None

    def as_dict(self) -> dict[str, Any]:
        """The row's keys, plus ``"error"``, ``"steps"`` and ``"backfill"`` (``inspect_backfills``' shape)."""
        return {
            **self.job.as_dict(),
            "error": self.error.as_dict() if self.error else None,
            "steps": [s.as_dict() for s in self.steps],
            "backfill": self.backfill.as_dict() if self.backfill else None,
        }


@dataclass(frozen=True, slots=True)
class JobActionResult:
    """What a single-job action did: the row as it is now (``None`` once removed)."""

    action: JobActionName
    id: str
    job: JobRow | None

    def as_dict(self) -> dict[str, Any]:
        """``{"action", "id", "job"}``."""
        return {"action": self.action, "id": self.id, "job": self.job.as_dict() if self.job else None}


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    """What a bulk action did over its filter: rows moved, what a further call could still move, and
    how many calls it took (one, unless it looped until nothing remained)."""

    action: BulkAction
    filter: Mapping[str, Any]
    affected: int
    remaining: int
    calls: int

    def as_dict(self) -> dict[str, Any]:
        """``{"action", "filter", "affected", "remaining", "calls"}``."""
        return {
            "action": self.action,
            "filter": dict(self.filter),
            "affected": self.affected,
            "remaining": self.remaining,
            "calls": self.calls,
        }


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue's rows of each live state, its dead-letter queue, its oldest due row and whether it is
    paused. Finished history (done, failed, cancelled) is not depth: ``jobs stats`` counts settles."""

    queue: str
    ready: int
    delayed: int
    running: int
    suspended: int
    dead: int
    oldest_ready_ms: int | None
    paused: bool
    declared: bool

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one queue."""
        return {
            "queue": self.queue,
            "ready": self.ready,
            "delayed": self.delayed,
            "running": self.running,
            "suspended": self.suspended,
            "dead": self.dead,
            "oldest_ready_ms": self.oldest_ready_ms,
            "paused": self.paused,
            "declared": self.declared,
        }


@dataclass(frozen=True, slots=True)
class PauseState:
    """A queue or task after a pause or resume; ``declared`` says whether this process knows it (a
    pause of a name nothing declares is kept, and usually a typo)."""

    kind: Literal["queue", "task"]
    name: str
    paused: bool
    declared: bool

    def as_dict(self) -> dict[str, Any]:
        """``{"kind", "name", "paused", "declared"}``."""
        return {"kind": self.kind, "name": self.name, "paused": self.paused, "declared": self.declared}


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A live worker: where it runs, what it serves, what it holds, when it last beat."""

    id: str
    host: str
    pid: int
    started_at_ms: int
    queues: tuple[str, ...]
    slots: int
    in_flight: tuple[str, ...]
    heartbeat_at_ms: int

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one worker."""
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "started_at_ms": self.started_at_ms,
            "queues": list(self.queues),
            "slots": self.slots,
            "in_flight": list(self.in_flight),
            "heartbeat_at_ms": self.heartbeat_at_ms,
        }


@dataclass(frozen=True, slots=True)
class RateRow:
    """One rate key's schedule under its limit (``key`` ``None``: a declared limit no start has used yet):
    the rate declared (``None`` for a key no job of this process declares), the jobs naming the limit,
    when its next start may come without waiting, and how many runs wait on reserved instants."""

    limit: str
    key: str | None
    rate: str | None
    jobs: tuple[str, ...]
    next_at_ms: int | None
    reserved: int

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one rate key."""
        return {
            "limit": self.limit,
            "key": self.key,
            "rate": self.rate,
            "jobs": list(self.jobs),
            "next_at_ms": self.next_at_ms,
            "reserved": self.reserved,
        }


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task: its declaration (``None`` when this process declares no task by that name — a pause
    or a fire left behind), whether it is paused, its last dispatched occurrence and its next one."""

    name: str
    descriptor: TaskDescriptor | None
    paused: bool
    last_occurrence_ms: int | None
    last_fired_at_ms: int | None
    next_run_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        """The descriptor's keys (``None`` when undeclared) plus the runtime state."""
        described = self.descriptor.as_dict() if self.descriptor else {}
        return {
            "name": self.name,
            "declared": self.descriptor is not None,
            "cron": described.get("cron"),
            "tz": described.get("tz"),
            "catch_up": described.get("catch_up"),
            "max_catch_up": described.get("max_catch_up"),
            "jobs": described.get("jobs"),
            "origin": described.get("origin"),
            "paused": self.paused,
            "last_occurrence_ms": self.last_occurrence_ms,
            "last_fired_at_ms": self.last_fired_at_ms,
            "next_run_ms": self.next_run_ms,
        }


@dataclass(frozen=True, slots=True)
class Manifest:
    """Every declared job and task, by name: what ``x.manifest.json`` holds."""

    jobs: tuple[JobDescriptor, ...]
    tasks: tuple[TaskDescriptor, ...]

    def as_dict(self) -> dict[str, Any]:
        """``{"jobs": [...], "tasks": [...]}``, each sorted by name."""
        return {"jobs": [j.as_dict() for j in self.jobs], "tasks": [t.as_dict() for t in self.tasks]}


@dataclass(frozen=True, slots=True)
class JobTotals:
    """One job's settles since an instant, and its summed and mean run time."""

    job: str
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0

    @property
    def settled(self) -> int:
        """Every counted settle."""
        return self.done + self.retried + self.failed + self.dead

    @property
    def mean_ms(self) -> int | None:
        """The mean run time of a counted settle."""
        return self.duration_ms // self.settled if self.settled else None

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` shape of one job's totals."""
        return {
            "job": self.job,
            "done": self.done,
            "retried": self.retried,
            "failed": self.failed,
            "dead": self.dead,
            "duration_ms": self.duration_ms,
            "mean_ms": self.mean_ms,
        }


@dataclass(frozen=True, slots=True)
class StatsView:
    """Settles per job over ``[since_ms, until_ms)``, from the counters the settles move."""

    since_ms: int
    until_ms: int
    jobs: tuple[JobTotals, ...] = field(default_factory=tuple)

    @property
    def total(self) -> JobTotals:
        """Every job summed (``job == "*"``)."""
        return JobTotals(
            job="*",
            done=sum(j.done for j in self.jobs),
            retried=sum(j.retried for j in self.jobs),
            failed=sum(j.failed for j in self.jobs),
            dead=sum(j.dead for j in self.jobs),
            duration_ms=sum(j.duration_ms for j in self.jobs),
        )

    def as_dict(self) -> dict[str, Any]:
        """``{"since_ms", "until_ms", "jobs": [...], "total": {...}}``."""
        return {
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
            "jobs": [j.as_dict() for j in self.jobs],
            "total": self.total.as_dict(),
        }
