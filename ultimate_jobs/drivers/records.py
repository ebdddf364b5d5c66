"""The records every driver answers in, and the limits and checks they share.

Drivers return these frozen records, never cursor rows or Redis hashes. Settles (``ack``, ``nack``,
``heartbeat``, ``save_step``, ``record_progress``) are fenced on the claim — ``ClaimRef(worker_id,
claim)`` — and answer whether they landed. A nack's target state comes from :func:`nack_state`,
shared by every driver so a new branch cannot land in one and not another. The driver protocol over
these records is :mod:`ultimate_jobs.drivers.protocol`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# re-exported: the instant bounds live with the clock
from ..core.clock import MAX_INSTANT_MS as MAX_INSTANT_MS
from ..core.clock import MIN_INSTANT_MS as MIN_INSTANT_MS

# re-exported: the drivers read these defaults here
from ..defaults import DEFAULT_VISIBILITY_TIMEOUT_MS as DEFAULT_VISIBILITY_TIMEOUT_MS
from ..defaults import PURGE_BATCH as PURGE_BATCH
from ..errors import InvariantError, JobDuplicateError, JobRowStatusUnknownError
from .ordering import DEFAULT_JOB_ORDER, JobOrder, check_order

# re-exported: the lists' cursors live with their orders
from .ordering import decode_cursor as decode_cursor
from .ordering import job_cursor as job_cursor

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
"""The instants a filter, a cursor or a stats window may name: Python's datetime range, inside what a
Postgres ``timestamptz`` holds (outside it ``to_timestamp`` is a database error)."""
PROGRESS_INTERVAL_MS = 1_000
LEASE_LAPSED_FINAL_ATTEMPT = "LEASE_LAPSED_FINAL_ATTEMPT"
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
    input_checked: bool = field(default=False, compare=False, repr=False)
    """Set by ``handle.build_request`` when ``input`` holds exactly the values it checked already (the raw
    input of a job without an input model): :func:`~ultimate_jobs.guards.admission.check_request` then does
    not walk it again."""


def same_tenant(stored: str | None, requested: str | None) -> bool:
    """Whether a stored row and a request are under the same tenant (no tenant and ``""`` are one, as in
    the live-key index ``x_jobs_name_tenant_idempotency_live_idx``)."""
    return (stored or "") == (requested or "")


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
class QueueStats:
    """Per-queue depth, as metrics and ``jobs queues`` read it: the rows of each live state and the
    dead-letter queue (``dead``). Rows done, failed or cancelled are history, not depth, and are not
    counted — reading them would slow every scrape as history grows; the settle counters say how many
    jobs finished (``driver.operator.counter_totals``)."""

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
        raise JobRowStatusUnknownError(
            f"job {self.id} is stored in state {str(self.state)[:40]!r}, which this version of ultimate_jobs does "
            f"not know (it knows {', '.join(JOB_STATES)}): a newer version wrote it, or the row was edited by hand. "
            "Read it with the version that wrote it, or set its state to one of these",
            {"job_id": self.id, "state": str(self.state)[:40], "known": list(JOB_STATES)},
        )


@dataclass(frozen=True, slots=True)
class JobFilter:
    """``list()``'s filter and page, sorted by ``order`` (newest first by default; see
    :mod:`.ordering`); ``after``/``before`` are cursors from :func:`job_cursor` of a row in that order.
    ``id_prefix`` and ``id_suffix`` are the start and the end of an id's canonical text (lowercase, dashed
    8-4-4-4-12); text no id starts or ends with matches no row. A prefix rides the primary key; no index
    serves a suffix, so a driver reads every row (a short id's lookup, ``jobs show 3b4c5d6e7f80``)."""

    queue: str | None = None
    name: str | None = None
    state: JobState | None = None
    tenant_id: str | None = None
    id_prefix: str | None = None
    id_suffix: str | None = None
    idempotency_key: str | None = None
    created_from_ms: int | None = None
    created_to_ms: int | None = None
    limit: int = DEFAULT_JOB_PAGE
    after: str | None = None
    before: str | None = None
    order: JobOrder = DEFAULT_JOB_ORDER

    def __post_init__(self) -> None:
        check_filter_text(
            self, ("queue", "name", "tenant_id", "id_prefix", "id_suffix", "idempotency_key", "after", "before")
        )
        check_instants(self, ("created_from_ms", "created_to_ms"))
        check_order(self.order)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of rows in the filter's order. A page shorter than its limit is the last. ``window`` is set
    when the rows were sorted within a window — the ``window`` newest rows the filter matches — and more
    rows match than it holds (see :mod:`.ordering`); ``None`` when the order covers every matching row."""

    rows: tuple[JobRecord, ...]
    limit: int
    window: int | None = None

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
    """One counter bucket of one job: settles by outcome, the summed duration, and the settles by run time
    (``run_bins[i]``: bin ``i`` of :data:`WAIT_EDGES_MS`; empty when none was counted)."""

    job: str
    bucket_ms: int
    width_ms: int
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0
    run_bins: tuple[int, ...] = ()


WAIT_EDGES_MS: tuple[int, ...] = (
    10,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
)
"""The wait histogram's bin edges: bin ``i`` counts the waits of at least ``WAIT_EDGES_MS[i - 1]`` (0 for the
first) and under ``WAIT_EDGES_MS[i]``; the last bin, every wait of an hour or more."""

WAIT_BINS = len(WAIT_EDGES_MS) + 1

COUNTER_VALUES = 5 + WAIT_BINS
"""A counter bucket's values as the memory and Redis stores keep them: done, retried, failed, dead, the
summed duration, then the settles by run time, a count per bin of :data:`WAIT_EDGES_MS`."""


def counter_bucket(job: str, bucket_ms: int, width_ms: int, values: Sequence[int]) -> CounterBucket:
    """The :class:`CounterBucket` of ``values`` (:data:`COUNTER_VALUES` of them; ``run_bins`` empty when
    none of the run-time bins counted anything)."""
    done, retried, failed, dead, duration_ms = values[:5]
    bins = tuple(values[5:COUNTER_VALUES])
    return CounterBucket(job, bucket_ms, width_ms, done, retried, failed, dead, duration_ms, bins if any(bins) else ())


def wait_bin(wait_ms: int) -> int:
    """The histogram bin of a wait (a negative one — a clock step — counts as none)."""
    return bisect_right(WAIT_EDGES_MS, max(0, wait_ms))


SAMPLE_KEEP_MS = 7 * 86_400_000
"""How long the queues' depth samples (``x_job_queue_samples``) are kept: the dashboard's longest window."""


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One queue's depth as the counter rollup saw it in one bucket: the most rows waiting (ready and delayed)
    and the oldest due row's age in ms (``None``: none was due). The rollup samples every queue with a row
    waiting, once a minute; ``queue`` ``""`` (depth 0) marks a bucket it sampled in, so a queue missing
    there had nothing waiting."""

    queue: str
    bucket_ms: int
    depth: int
    oldest_age_ms: int | None


def queue_samples_of(stats: Sequence[QueueStats], now_ms: int) -> list[QueueSample]:
    """The rollup's sample at ``now_ms`` of the queues ``stats`` describes, in the minute holding it: the
    marker of the minute, then each queue with a row waiting."""
    minute = now_ms - now_ms % COUNTER_TIERS[0][0]
    return [QueueSample("", minute, 0, None)] + [
        QueueSample(
            s.queue,
            minute,
            s.ready + s.delayed,
            None if s.oldest_ready_ms is None else max(0, now_ms - s.oldest_ready_ms),
        )
        for s in stats
        if s.ready + s.delayed
    ]


def merged_samples(samples: Iterable[QueueSample], width_ms: int) -> list[QueueSample]:
    """``samples`` gathered per queue into buckets of ``width_ms``: the most waiting and the oldest age any
    sample of the bucket saw, by bucket and queue."""
    merged: dict[tuple[int, str], QueueSample] = {}
    for s in samples:
        key = (s.bucket_ms - s.bucket_ms % width_ms, s.queue)
        seen = merged.get(key)
        if seen is None:
            merged[key] = QueueSample(s.queue, key[0], s.depth, s.oldest_age_ms)
        else:
            ages = [a for a in (seen.oldest_age_ms, s.oldest_age_ms) if a is not None]
            merged[key] = QueueSample(s.queue, key[0], max(seen.depth, s.depth), max(ages) if ages else None)
    return [merged[key] for key in sorted(merged)]


@dataclass(frozen=True, slots=True)
class WaitBucket:
    """One queue's waits in one counter bucket: how many attempts started in it, by how long each waited
    from its row's run time (``counts[i]``: bin ``i`` of :data:`WAIT_EDGES_MS`)."""

    queue: str
    bucket_ms: int
    width_ms: int
    counts: tuple[int, ...]


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


def finished_cutoffs(before_ms: Mapping[JobState, int], limit: int) -> dict[JobState, int]:
    """``before_ms`` checked: finished states only (``X_INVARIANT`` on a live one — retention never deletes
    work still to do), each an int instant, and ``limit`` at least 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvariantError(f"purge_finished: limit must be an int >= 1, got {limit!r}", {"limit": limit})
    cutoffs: dict[JobState, int] = {}
    for state, instant in before_ms.items():
        if state not in FINISHED_STATES:
            raise InvariantError(
                f"purge_finished: {state!r} is not a finished state; retention deletes only {FINISHED_STATES}",
                {"state": state},
            )
        if isinstance(instant, bool) or not isinstance(instant, int):
            raise InvariantError(f"purge_finished: the {state} cutoff must be epoch ms, got {instant!r}", {})
        cutoffs[state] = instant
    return cutoffs
