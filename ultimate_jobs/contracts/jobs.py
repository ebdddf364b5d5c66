"""The hot path's records: what an enqueue sends, what a claim answers, and how a settle is fenced and
counted. Drivers answer in these frozen records, never cursor rows or Redis hashes. Settles (``ack``,
``nack``, ``heartbeat``, ``save_step``, ``record_progress``) are fenced on the claim —
``ClaimRef(worker_id, claim)`` — and answer whether they landed. A nack's target state comes from
:func:`nack_state`, shared by every driver so a new branch cannot land in one and not another."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import JobDuplicateError

JobState = Literal["ready", "delayed", "running", "suspended", "done", "failed", "dead", "cancelled"]
JobOutcome = Literal["completed", "suspended", "retried", "dead-lettered", "dropped", "interrupted", "refused"]
NackTarget = Literal["dead", "failed", "suspended", "ready"]

JOB_STATES: tuple[JobState, ...] = ("ready", "delayed", "running", "suspended", "done", "failed", "dead", "cancelled")
LIVE_STATES: tuple[JobState, ...] = ("ready", "delayed", "running", "suspended")
REQUEUEABLE_STATES: tuple[JobState, ...] = ("done", "failed", "dead", "cancelled")
PROMOTABLE_STATES: tuple[JobState, ...] = ("delayed", "ready")
FINISHED_STATES = REQUEUEABLE_STATES
PROGRESS_INTERVAL_MS = 1_000
LEASE_LAPSED_FINAL_ATTEMPT = "LEASE_LAPSED_FINAL_ATTEMPT"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """The fence every settle carries: the worker that claimed and the claim token it got."""

    worker_id: str
    claim: str


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job row to insert. ``id``/``run_id`` name the row when the caller allocated them (outbox)."""

    name: str
    queue: str
    input: Mapping[str, Any]
    idempotency_key: str
    tenant_id: str | None
    max_attempts: int
    priority: int = 0
    run_at_ms: int | None = None
    id: str | None = None
    run_id: str | None = None
    on_conflict: Literal["dedupe", "error"] = "dedupe"
    enqueued_by: str | None = None
    traceparent: str | None = None
    concurrency_key: str | None = None
    input_checked: bool = field(default=False, compare=False, repr=False)
    """Set by ``handle.build_request`` when ``input`` holds exactly the values it checked already (the raw
    input of a job without an input model): :func:`~ultimate_jobs.guards.admission.check_request` then does
    not walk it again."""


def same_tenant(stored: str | None, requested: str | None) -> bool:
    """Whether a stored row and a request are under the same tenant (no tenant and ``""`` are one, as in
    the live-key index ``x_jobs_name_tenant_idempotency_live_idx``)."""
    return (stored or "") == (requested or "")


def lane_of(request: EnqueueRequest, fair_queues: frozenset[str]) -> str | None:
    """The request's lane in a fair queue — its tenant, ``""`` for none (jobs with no tenant share one
    lane) — or ``None`` when its queue is not among ``fair_queues``."""
    return (request.tenant_id or "") if request.queue in fair_queues else None


def id_taken(request: EnqueueRequest) -> JobDuplicateError:
    """``X_JOB_DUPLICATE`` for a request whose ``id`` names a row of another tenant. Every driver answers
    it the same way and it says nothing of that row — no run id, no tenant, no state — so a caller cannot
    read another org's job through an id (a row of the request's own tenant answers ``deduped=True``)."""
    return JobDuplicateError(
        f"{request.name}: id {request.id} is already in use; leave id= out (one is allocated) or pass a fresh UUID",
        {"job": request.name, "field": "id"},
    )


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What an enqueue answers on every path: the job's id, its run id, and whether a live key deduped it."""

    id: str
    run_id: str
    deduped: bool


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One persisted step. ``status`` is ``done`` (output is final), ``sleeping`` or ``waiting``."""

    name: str
    seq: int
    status: Literal["done", "sleeping", "waiting"]
    output: Any = None
    started_at_ms: int = 0
    finished_at_ms: int | None = None
    wake_at_ms: int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A row a claim handed out, with its completed steps preloaded for replay."""

    id: str
    run_id: str
    name: str
    queue: str
    tenant_id: str | None
    idempotency_key: str
    input: Mapping[str, Any]
    attempt: int
    max_attempts: int
    priority: int
    run_at_ms: int
    created_at_ms: int
    worker_id: str
    claim: str
    lease_until_ms: int
    steps: tuple[StepRecord, ...] = ()
    concurrency_key: str | None = None
    enqueued_by: str | None = None
    traceparent: str | None = None
    ref: ClaimRef = field(init=False, repr=False, compare=False)
    """``claimOf(claimed)``: the fence this claim's settles carry (built once: every settle reads it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", ClaimRef(self.worker_id, self.claim))


@dataclass(frozen=True, slots=True)
class ExhaustedJob:
    """A row the claim buried because its lease lapsed on the final attempt."""

    id: str
    run_id: str
    name: str
    queue: str
    tenant_id: str | None
    input: Mapping[str, Any]
    attempt: int
    state: Literal["dead", "failed"]


@dataclass(frozen=True, slots=True)
class Claim:
    """What one ``claim()`` took: ``jobs``, now running under the claimant's lease (priority, due
    instant, id order), and ``buried``: lapsed final attempts it settled dead (or failed) on the way,
    whose ``on_settled`` the caller tells (:func:`ultimate_jobs.core.settled.announce_exhausted`)."""

    jobs: Sequence[ClaimedJob] = ()
    buried: Sequence[ExhaustedJob] = ()


@dataclass(frozen=True, slots=True)
class NackOptions:
    """How a nack settles a row. Read the target through :func:`nack_state`, never by hand.

    ``count_attempt=False`` hands the attempt back (a suspension, a drain, a shed): the attempt
    number is not spent and no counter moves, unless the row ends ``failed`` (a refusal).
    """

    error: str | None = None
    code: str | None = None
    run_at_ms: int | None = None
    dead_letter: bool = False
    fail: bool = False
    park: bool = False
    count_attempt: bool = True
    duration_ms: int | None = None
    wait_ms: int | None = None  # from the row's run time to this attempt's start, counted with a counted nack


def nack_state(options: NackOptions) -> NackTarget:
    """The one answer to "where does a nacked row go": dead, failed, suspended (park) or ready."""
    if options.dead_letter:
        return "dead"
    if options.fail:
        return "failed"
    if options.park:
        return "suspended"
    return "ready"


def nack_counter(options: NackOptions) -> Literal["retried", "failed", "dead"] | None:
    """The counter a nack moves in its settling statement: none for a handed-back attempt."""
    target = nack_state(options)
    if target == "dead":
        return "dead"
    if target == "failed":
        return "failed"
    if target == "ready" and options.count_attempt:
        return "retried"
    return None


@dataclass(frozen=True, slots=True)
class Ack:
    """One row to settle ``done`` in a batched ack."""

    job_id: str
    ref: ClaimRef
    duration_ms: int = 0
    wait_ms: int | None = None  # from the row's run time to this attempt's start; None counts no wait


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One lease to renew in a batched heartbeat."""

    job_id: str
    ref: ClaimRef


@dataclass(frozen=True, slots=True)
class Progress:
    """What ``run.progress(done, total, note)`` last wrote."""

    done: float
    total: float | None
    note: str | None
    at_ms: int
