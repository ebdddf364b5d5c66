"""The driver seam: the protocol every backend implements and the records it trades in.

Drivers return these frozen records, never cursor rows or Redis hashes. Settles (``ack``, ``nack``,
``heartbeat``, ``save_step``, ``record_progress``) are fenced on the claim — ``ClaimRef(worker_id,
claim)`` — and answer whether they landed. A nack's target state comes from :func:`nack_state`,
shared by every driver so a new branch cannot land in one and not another.
"""

from __future__ import annotations

import base64
import builtins
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

JobState = Literal["ready", "delayed", "running", "suspended", "done", "failed", "dead", "cancelled"]
JobOutcome = Literal["completed", "suspended", "retried", "dead-lettered", "dropped", "interrupted", "refused"]
NackTarget = Literal["dead", "failed", "suspended", "ready"]

JOB_STATES: tuple[JobState, ...] = ("ready", "delayed", "running", "suspended", "done", "failed", "dead", "cancelled")
LIVE_STATES: tuple[JobState, ...] = ("ready", "delayed", "running", "suspended")
REQUEUEABLE_STATES: tuple[JobState, ...] = ("done", "failed", "dead", "cancelled")
PROMOTABLE_STATES: tuple[JobState, ...] = ("delayed", "ready")
FINISHED_STATES = REQUEUEABLE_STATES

MAX_JOB_PAGE = 200
DEFAULT_JOB_PAGE = 100
MAX_BULK_ROWS = 1_000
MAX_WORKER_IN_FLIGHT = 100
MAX_TASK_FIRES = 1_000
MIN_INSTANT_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
MAX_INSTANT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
"""The instants a filter, a cursor or a stats window may name: Python's datetime range, inside what a
Postgres ``timestamptz`` holds (outside it ``to_timestamp`` is a database error)."""
PROGRESS_INTERVAL_MS = 1_000
LEASE_LAPSED_FINAL_ATTEMPT = "LEASE_LAPSED_FINAL_ATTEMPT"
DEFAULT_VISIBILITY_TIMEOUT_MS = 30_000
PURGE_BATCH = 1_000
"""The most rows one retention delete removes (``purge_finished``, the outbox's ``purge_published``): a
purge of millions of rows is thousands of short statements, never one long transaction."""
COUNTER_TIERS: tuple[tuple[int, int], ...] = (
    (60_000, 24 * 3_600_000),  # 1-minute buckets kept 24 h
    (300_000, 7 * 86_400_000),  # 5-minute buckets kept 7 d
    (3_600_000, 30 * 86_400_000),  # 1-hour buckets kept 30 d
)
"""``(bucket width, retention)`` per tier — 1,440 + 2,016 + 720 = 4,176 rows per job name at most."""


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

    @property
    def ref(self) -> ClaimRef:
        """``claimOf(claimed)``: the fence this claim's settles carry."""
        return ClaimRef(self.worker_id, self.claim)


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


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One lease to renew in a batched heartbeat."""

    job_id: str
    ref: ClaimRef


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Per-queue depth, as metrics and ``jobs queues`` read it: the rows of each live state and the
    dead-letter queue (``dead``). Rows done, failed or cancelled are history, not depth, and are not
    counted — reading them would slow every scrape as history grows; the settle counters say how many
    jobs finished (``introspect.counter_totals``)."""

    queue: str
    ready: int = 0
    delayed: int = 0
    running: int = 0
    suspended: int = 0
    dead: int = 0
    oldest_ready_ms: int | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class Progress:
    """What ``run.progress(done, total, note)`` last wrote."""

    done: float
    total: float | None
    note: str | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job row as the operator surface sees it."""

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
    input: Mapping[str, Any]
    last_error: str | None = None
    last_code: str | None = None
    finished_at_ms: int | None = None
    worker_id: str | None = None
    lease_until_ms: int | None = None
    progress: Progress | None = None
    enqueued_by: str | None = None
    traceparent: str | None = None
    concurrency_key: str | None = None

    def __post_init__(self) -> None:
        # Every driver decodes its rows into this record (get, list, the operator's answers): a state this
        # version does not know is refused here, once for all drivers, rather than shown as if valid.
        if self.state in JOB_STATES:
            return
        from ..errors import JobRowStatusUnknownError

        raise JobRowStatusUnknownError(
            f"job {self.id} is stored in state {str(self.state)[:40]!r}, which this version of ultimate_jobs does "
            f"not know (it knows {', '.join(JOB_STATES)}): a newer version wrote it, or the row was edited by hand. "
            "Read it with the version that wrote it, or set its state to one of these",
            {"job_id": self.id, "state": str(self.state)[:40], "known": list(JOB_STATES)},
        )


@dataclass(frozen=True, slots=True)
class JobFilter:
    """``list()``'s filter and page: newest first; ``after``/``before`` are cursors from :func:`job_cursor`."""

    queue: str | None = None
    name: str | None = None
    state: JobState | None = None
    tenant_id: str | None = None
    id_prefix: str | None = None
    idempotency_key: str | None = None
    created_from_ms: int | None = None
    created_to_ms: int | None = None
    limit: int = DEFAULT_JOB_PAGE
    after: str | None = None
    before: str | None = None

    def __post_init__(self) -> None:
        check_filter_text(self, ("queue", "name", "tenant_id", "id_prefix", "idempotency_key", "after", "before"))
        check_instants(self, ("created_from_ms", "created_to_ms"))


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of rows, newest first. A page shorter than its limit is the last."""

    rows: tuple[JobRecord, ...]
    limit: int

    @property
    def is_last(self) -> bool:
        """True when no older page exists."""
        return len(self.rows) < self.limit


@dataclass(frozen=True, slots=True)
class BulkFilter:
    """The set a bulk operation works over."""

    state: JobState
    queue: str | None = None
    name: str | None = None
    tenant_id: str | None = None

    def __post_init__(self) -> None:
        check_filter_text(self, ("queue", "name", "tenant_id"))


# The longest text a list or bulk filter takes: longer names no row, and an attacker's megabyte of
# filter text should not reach the database.
MAX_FILTER_CHARS = 500


def filter_text_problem(value: str) -> str | None:
    """Why ``value`` can be no filter — a NUL byte (Postgres text cannot store one, and the driver would
    answer a DataError), a lone surrogate (no UTF-8 encodes it) or more than MAX_FILTER_CHARS — or
    ``None`` when it can."""
    if "\x00" in value:
        return "contains a NUL byte; no job has one — check how the value was built"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: bytes that were no UTF-8 on the command line
            return "is not valid UTF-8 text; no job has it — check how the value was built"
    if len(value) > MAX_FILTER_CHARS:
        return f"is {len(value)} characters; at most {MAX_FILTER_CHARS} are taken"
    return None


def check_instants(flt: object, fields: Sequence[str]) -> None:
    """Refuse an instant outside :data:`MIN_INSTANT_MS`..:data:`MAX_INSTANT_MS` (no row was created then,
    and Postgres cannot compare with it) with ``X_JOB_PAGE_INVALID``, before any statement runs."""
    from ..errors import JobPageInvalidError

    for name in fields:
        value = getattr(flt, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not MIN_INSTANT_MS <= value <= MAX_INSTANT_MS:
            raise JobPageInvalidError(
                f"{name}={value!r} is no instant in 0001-01-01..9999-12-31 (epoch ms "
                f"{MIN_INSTANT_MS}..{MAX_INSTANT_MS})",
                {"field": name},
            )


def check_filter_text(flt: object, fields: Sequence[str]) -> None:
    """Refuse a filter whose text no row can hold (:func:`filter_text_problem`) with
    ``X_JOB_PAGE_INVALID``, before any statement runs."""
    from ..errors import JobPageInvalidError

    for name in fields:
        value = getattr(flt, name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise JobPageInvalidError(f"{name} must be text, got {type(value).__name__}", {"field": name})
        problem = filter_text_problem(value)
        if problem is not None:
            raise JobPageInvalidError(f"{name} {problem}", {"field": name, "max": MAX_FILTER_CHARS})


@dataclass(frozen=True, slots=True)
class BulkResult:
    """Rows moved by this call, and what a second call could still move — "call until zero" ends."""

    affected: int
    remaining: int


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker's registry row."""

    id: str
    host: str
    pid: int
    started_at_ms: int
    queues: tuple[str, ...]
    slots: int
    in_flight: tuple[str, ...]
    heartbeat_at_ms: int


@dataclass(frozen=True, slots=True)
class CounterBucket:
    """One counter bucket of one job: settles by outcome and the summed duration."""

    job: str
    bucket_ms: int
    width_ms: int
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0


@dataclass(frozen=True, slots=True)
class CounterTotals:
    """A job's summed counters since an instant."""

    job: str
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0


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


class LeaderStore(Protocol):
    """``driver.leader``: lease rows for leader elections (the scheduler's) — at most one holder per name,
    whose lease lapses ``ttl_ms`` after its last renewal. Instants are the caller's (``now_ms``): the
    election runs on the clock of the role that asks."""

    durable: bool
    """Whether a lease outlives this process (a database row) — two processes then contend for it."""

    def acquire(self, name: str, holder: str, *, ttl_ms: int, now_ms: int, rollup: bool = False) -> LeaderLease | None:
        """Take or renew lease ``name`` for ``holder`` until ``now_ms + ttl_ms``: it lands when no lease is
        stored, when it is ``holder``'s own, or when it lapsed (``expires_at_ms <= now_ms``); a live lease
        of another holder answers ``None`` and is left alone. A renewal of ``holder``'s live lease keeps
        its ``acquired_at_ms``; anything else starts a term at ``now_ms``. With ``rollup``, the counter
        rollup (``introspect.rollup_counters`` at ``now_ms``) runs in the same round trip when — and only
        when — the lease landed: what a leader owes once a minute, at no statement of its own."""

    def release(self, name: str, holder: str) -> bool:
        """Hand ``holder``'s lease back (a clean stop), so another takes it at its next ask rather than
        after the TTL. Fenced on the holder: a lease another holder took meanwhile is left alone. Answers
        whether a lease was released."""

    def current(self, name: str) -> LeaderLease | None:
        """The stored lease of ``name`` — live or lapsed, compare ``expires_at_ms`` — or ``None``."""


class SchedulerStore(Protocol):
    """``driver.scheduler_state``: the scheduler's stored state — per task, the watermark (the last
    occurrence it dealt with, fired or passed over) and the last fire — and the fire that moves a
    watermark together with its occurrence's jobs. Pauses are ``introspect.pause_task`` rows the fire
    reads; the last fires are ``introspect.task_fires()``."""

    durable: bool
    """Whether the watermarks outlive this process: a redeployed scheduler reads where the last one
    stopped, so catch-up sees what the gap dropped."""

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        """Every named task's watermark, arming those that have none at ``now_ms`` (arming is not a fire,
        and a watermark another scheduler armed first is kept)."""

    def fire(self, fire: Fire) -> FireResult:
        """Fire one occurrence, all or nothing: move the watermark only while it still holds
        ``fire.previous_ms`` and the task is not paused, enqueue ``fire.requests`` (``enqueue_many``'s
        rules, deduping whatever a request's ``on_conflict``: nothing under an id that names a row or a
        live key, each due queue announced once) and record the fire (``task_fires``). A refused fire
        writes nothing."""


@runtime_checkable
class LeaseStore(Protocol):
    """Fleet-wide slots: at most ``limit`` holders per key, each lapsing ``ttl_ms`` after its last renewal."""

    def acquire(self, key: str, holder: str, *, limit: int, ttl_ms: int) -> bool:
        """Take a slot of ``key`` for ``holder`` (idempotent for a holder that already has one)."""

    def renew(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        """Extend ``holder``'s slot; ``False`` when it lapsed or was taken."""

    def release(self, key: str, holder: str) -> None:
        """Give the slot back. A holder that holds nothing is a no-op."""

    def holders(self, key: str) -> list[str]:
        """The live holders of one key, in slot order."""


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


class BackfillStore(Protocol):
    """``driver.backfills``: the ``x_backfills`` ledger, one row per pass. Only a backfill's pass writes it;
    every surface reads it through ``operator.inspect_backfills``.

    Signatures after ``def list`` spell ``builtins.list``: inside this class body ``list`` is the method.
    """

    def begin(self, begin: BackfillBegin) -> BackfillRun:
        """The row of ``begin.run_id`` set ``running`` — a retry adopts its own row, keeping its
        ``started_at_ms``, the checksum the pass began with, its counts and its id (the app version becomes
        this attempt's) — or, when the run has none, a new ``running`` row started at ``begin.now_ms``."""

    def progress(self, row_id: str, *, rows_processed: int, batches: int, last_cursor: Any, now_ms: int) -> bool:
        """Record a pass's counts and cursor after a page; only a ``running`` row moves. Answers whether it
        landed."""

    def finish(
        self,
        row_id: str,
        *,
        status: Literal["completed", "failed"],
        rows_processed: int | None = None,
        batches: int | None = None,
        error_code: str | None = None,
        now_ms: int,
    ) -> bool:
        """Settle a pass ``completed`` (stamping ``completed_at_ms``) or ``failed`` (keeping ``error_code``);
        counts given replace the stored ones. Answers whether a row was settled."""

    def completed(self, name: str, tenant_id: str | None) -> BackfillRun | None:
        """The newest ``completed`` row of ``name`` (under ``tenant_id``; ``None`` is the cross-tenant
        pass), or ``None``: the row that makes a re-run answer ``skipped``."""

    def list(
        self, *, name: str | None = None, status: BackfillStatus | None = None, limit: int = 100
    ) -> builtins.list[BackfillRun]:
        """Ledger rows, newest first (``started_at_ms``, then ``id``), optionally of one name or status."""


class JobIntrospection(Protocol):
    """Every operator capability. The CLI, the admin and the JSON views read nothing else.

    Signatures after ``def list`` spell ``builtins.list``: inside this class body ``list`` is the method.
    """

    def get(self, job_id: str) -> JobRecord | None: ...
    def steps(self, job_id: str) -> list[StepRecord]: ...
    def list(self, flt: JobFilter) -> JobPage: ...
    def remove(self, job_id: str) -> None: ...
    def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRecord: ...
    def cancel(self, job_id: str, reason: str | None = None) -> JobRecord | None: ...
    def requeue_many(self, flt: BulkFilter) -> BulkResult: ...
    def remove_many(self, flt: BulkFilter) -> BulkResult: ...
    def promote_many(self, flt: BulkFilter) -> BulkResult: ...
    def promote(self, job_id: str) -> JobRecord: ...
    def pause_queue(self, queue: str) -> None: ...
    def resume_queue(self, queue: str) -> None: ...
    def paused_queues(self) -> builtins.list[str]: ...
    def pause_task(self, task: str) -> None: ...
    def resume_task(self, task: str) -> None: ...
    def paused_tasks(self) -> builtins.list[str]: ...
    def record_worker(self, info: WorkerInfo) -> None: ...
    def remove_worker(self, worker_id: str) -> None: ...
    def workers(self) -> builtins.list[WorkerInfo]: ...
    def counters(self, *, job: str, since_ms: int) -> builtins.list[CounterBucket]: ...
    def counter_totals(self, since_ms: int) -> builtins.list[CounterTotals]: ...
    def rollup_counters(self) -> int:
        """Fold every counter bucket past its tier's retention (:data:`COUNTER_TIERS`) into the narrowest
        wider tier whose bucket containing it is still retained — or drop it when none is — in one step,
        at the driver's now: the state folding tier by tier reaches. Idempotent. Answers how many buckets
        were folded or dropped. The scheduler's leader runs it once a minute (``driver.leader.acquire(...,
        rollup=True)``); every driver answers the same buckets and count for the same history."""

    def record_progress(self, job_id: str, ref: ClaimRef, progress: Progress) -> bool: ...
    def task_fires(self) -> builtins.list[TaskFire]: ...


class JobDriver(Protocol):
    """The one interface a job queue backend implements. Job code never names a backend."""

    name: str
    supports_listen: bool

    @property
    def introspect(self) -> JobIntrospection | None:
        """The operator surface, or ``None`` (then operator calls are ``X_NOT_IMPLEMENTED``)."""

    @property
    def leases(self) -> LeaseStore | None:
        """The fleet-wide lease store, or ``None`` (then a job declaring concurrency cannot run)."""

    @property
    def leader(self) -> LeaderStore | None:
        """The leader-election lease rows the scheduler's leader runs on, or ``None`` (then a scheduler on
        this driver needs a leader passed in)."""

    @property
    def scheduler_state(self) -> SchedulerStore | None:
        """The scheduler's watermarks and fires, or ``None`` (then no scheduler runs on this driver)."""

    @property
    def backfills(self) -> BackfillStore | None:
        """The ``x_backfills`` ledger, or ``None`` (then a backfill's pass runs anyway, with no bookkeeping:
        no row, no ``skipped`` answer)."""

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        """Insert one row; a live key answers the live row with ``deduped=True`` (or ``X_JOB_DUPLICATE``)."""

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Insert many rows in one round trip, one answer per request in order."""

    def claim(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS,
        on_exhausted: Callable[[list[ExhaustedJob]], None] | None = None,
        drop_exhausted: frozenset[str] = frozenset(),
        queue_limits: Mapping[str, int] | None = None,
        record: WorkerInfo | None = None,
    ) -> list[ClaimedJob]:
        """Take up to ``limit`` due rows of ``queues`` — at most ``queue_limits[q]`` of queue ``q`` when
        given, so one claim serves every queue with a free slot — burying lapsed final attempts on the way.
        With ``record``, also write that worker's registry row (what ``introspect.record_worker`` writes)
        in the same round trip, so an idle worker's registry costs no statement of its own."""

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None) -> bool:
        """Settle a running row ``done``, fenced on ``ref``; answers whether it landed."""

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        """Settle many running rows ``done`` in one round trip, each fenced on its own claim; answers
        the job ids that landed."""

    def nack(self, job_id: str, ref: ClaimRef, options: NackOptions) -> bool:
        """Settle a running row by :func:`nack_state`, fenced on ``ref``; answers whether it landed."""

    def heartbeat(self, beats: Sequence[Heartbeat], *, visibility_timeout_ms: int) -> frozenset[str]:
        """Renew many leases in one round; answers the job ids whose renewal landed. A miss is not logged:
        the caller knows whether it is a lost lease or a renewal that crossed the job's own settle."""

    def save_step(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        """Persist one step under the claim; answers whether it landed."""

    def stats(self) -> list[QueueStats]:
        """Per-queue counts of the live states and of dead rows, without reading a done, failed or
        cancelled row."""

    def purge_finished(self, *, before_ms: Mapping[JobState, int], limit: int = PURGE_BATCH) -> int:
        """Delete at most ``limit`` finished rows and their steps in ONE statement: rows of the states
        ``before_ms`` names (finished states only), each finished before its state's instant, oldest
        finished first. A live row never goes, nor a row requeued while the delete ran. Answers how many
        rows went; retention calls it again while a batch comes back full."""

    def close(self) -> None:
        """Release connections and timers. Idempotent."""


def job_cursor(row: JobRecord) -> str:
    """The cursor of a row: ``filter.after = job_cursor(last_row)`` pages older, ``before`` newer."""
    raw = json.dumps({"c": row.created_at_ms, "i": row.id}, separators=(",", ":")).encode()
    return "jc1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, which: str) -> tuple[int, str]:
    """``(created_at_ms, id)`` of a cursor :func:`job_cursor` produced; anything else is ``X_JOB_PAGE_INVALID``."""
    from ..errors import JobPageInvalidError

    try:
        if not cursor.startswith("jc1."):
            raise ValueError("prefix")
        body = cursor[4:]
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        created, job_id = data["c"], data["i"]
        if isinstance(created, bool) or not isinstance(created, int) or not isinstance(job_id, str):
            raise ValueError("shape")
        if not MIN_INSTANT_MS <= created <= MAX_INSTANT_MS:
            raise ValueError("instant")
        return created, job_id
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise JobPageInvalidError(
            f"filter.{which} is not a cursor a page produced; pass job_cursor(row) of a row from the previous page. "
            "Fix: python manage.py jobs list --limit 200 --json",
            {"cursor": which},
        ) from exc


def check_page(flt: JobFilter) -> None:
    """Refuse a limit over :data:`MAX_JOB_PAGE` (or below 1) and a filter carrying both cursors."""
    from ..errors import JobPageInvalidError

    if isinstance(flt.limit, bool) or not isinstance(flt.limit, int) or not 1 <= flt.limit <= MAX_JOB_PAGE:
        raise JobPageInvalidError(
            f"limit {flt.limit!r} is outside 1..{MAX_JOB_PAGE}. Fix: python manage.py jobs list --limit 200 --json",
            {"limit": flt.limit},
        )
    if flt.after is not None and flt.before is not None:
        raise JobPageInvalidError("pass filter.after or filter.before, never both", {"cursor": "after"})
