"""The driver contract: the one interface a job queue backend implements (:class:`JobDriver`), the optional
stores it may carry (the operator's store, fleet leases, the scheduler's state and leader, the backfill ledger),
and the capabilities it declares. The records they answer in are the other modules of
:mod:`ultimate_jobs.contracts` (``jobs``, ``operator``, ``series``, ``schedules``)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from ..defaults import PURGE_BATCH
from .jobs import Ack, Claim, ClaimRef, Enqueued, EnqueueRequest, Heartbeat, JobState, NackOptions, Progress, StepRecord
from .operator import BulkFilter, BulkResult, JobFilter, JobPage, JobRecord, QueueStats, WorkerInfo
from .ordering import JobCount
from .schedules import BackfillBegin, BackfillRun, BackfillStatus, Fire, FireResult, LeaderLease, RateState, TaskFire
from .series import CounterBucket, CounterTotals, QueueSample, WaitBucket


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
        rollup (``driver.rollup_counters`` at ``now_ms``) runs in the same round trip when — and only
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
    watermark together with its occurrence's jobs. Pauses are ``driver.operator.pause_task`` rows the fire
    reads; the last fires are ``driver.operator.task_fires()``."""

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


class RateStore(Protocol):
    """Each rate key's schedule of starts, across the fleet (``@job(rate_limit=...)``): one start per
    ``interval_ms``, and the instants reserved for runs that found their key busy."""

    def take(self, key: str, holder: str, *, interval_ms: int, now_ms: int, near_ms: int = 0) -> int:
        """Start ``holder`` (a job id) under ``key``: the milliseconds until the instant it starts on — ``0``
        for now. At most ``near_ms`` away, the instant is the holder's to wait for and start on without
        another take: its own reservation (made by an earlier take, spent now) or the key's next free
        instant (taken, and nothing stored). Further away, the instant this take reserved for it (or the one
        it holds already), to come back for. A reservation more than one interval past is stale: the take
        is a fresh one. One round trip."""

    def state(self) -> builtins.list[RateState]:
        """Every key's schedule: its next free instant and the reservations it holds."""

    def forget(self, *, before_ms: int) -> int:
        """Drop the schedules whose next free instant, and the reservations whose instant, is before
        ``before_ms`` (a key nobody started for since, a reservation its job never came back for);
        answers how many rows went."""


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


class OperatorStore(Protocol):
    """``driver.operator``: what an operator reads and does — rows, steps and pages; remove, requeue, cancel,
    promote, one by one or in bulk; queue and task pauses; the worker registry, the counters and the task
    fires as they stand. The CLI, the admin and the JSON views read nothing else. The writes a running
    worker or scheduler makes (the registry row, progress, the counter rollup) are the driver's own
    (:class:`JobDriver`), so a driver without this store still runs jobs.

    Signatures after ``def list`` spell ``builtins.list``: inside this class body ``list`` is the method.
    """

    def get(self, job_id: str) -> JobRecord | None: ...
    def steps(self, job_id: str) -> list[StepRecord]: ...
    def list(self, flt: JobFilter) -> JobPage:
        """One page of the rows ``flt`` matches, in ``flt.order`` (an index walk: the page reads the rows it
        shows, not the finished rows beside them)."""
        ...

    def count(self, flt: JobFilter) -> JobCount:
        """How many rows ``flt`` matches (its cursors and limit aside; sorted by ``finished``, finished rows
        only): exact when counting reads at most :data:`~.ordering.COUNT_CAP` rows of an index, else an
        estimate or a bound, labelled by its ``basis``."""
        ...

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
    def workers(self) -> builtins.list[WorkerInfo]: ...
    def counters(self, *, job: str, since_ms: int) -> builtins.list[CounterBucket]: ...
    def counter_totals(self, since_ms: int) -> builtins.list[CounterTotals]: ...
    def counter_series(self, since_ms: int, width_ms: int) -> builtins.list[CounterBucket]:
        """Every job's buckets that end after ``since_ms``, summed into buckets of ``width_ms`` (a whole number
        of every tier's width it reaches; ``job`` is ``""``), oldest first — one row per bucket of that width,
        however many jobs there are."""

    def queue_samples(self, since_ms: int, width_ms: int) -> builtins.list[QueueSample]:
        """The queues' depth samples (``x_job_queue_samples``, taken by the counter rollup) from ``since_ms``
        on, gathered into buckets of ``width_ms``: per bucket and queue the most rows waiting and the oldest
        due row's age any sample saw, by bucket and queue (``""``: the bucket was sampled)."""

    def wait_series(self, since_ms: int, width_ms: int) -> builtins.list[WaitBucket]:
        """Every queue's wait histograms (``x_job_waits``) in the buckets that end after ``since_ms``, summed
        into buckets of ``width_ms``, oldest first: how many attempts started, by how long each waited from its
        row's run time."""

    def task_fires(self) -> builtins.list[TaskFire]: ...


class AsyncEnqueuer(Protocol):
    """A driver's native async enqueue: the rows of ``enqueue_many``, written from the event loop."""

    async def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Write ``requests`` as ``JobDriver.enqueue_many`` does, awaited; one answer per request, in order."""


class JobDriver(Protocol):
    """The one interface a job queue backend implements. Job code never names a backend.

    What a driver can do is declared, never probed — as ``django.tasks`` backends declare
    ``supports_defer``: the ``supports_*`` flags say whether the optional wake methods answer, and the
    optional stores (``operator``, ``leases``, ``leader``, ``scheduler_state``, ``backfills``) are
    always attributes, ``None`` where the driver has none. The system check (:mod:`ultimate_jobs.checks`)
    refuses a configured driver that leaves one of them undeclared (:data:`DECLARED_CAPABILITIES`).

    The writes the running roles make — progress, the worker registry, the counter rollup — are methods of
    the driver itself, beside ``heartbeat`` and ``save_step``, not of an optional store: every driver
    takes them (one that keeps no such data makes them no-ops).
    """

    name: str

    @property
    def alias(self) -> str | None:
        """The Django database alias the driver's rows live in — an enqueue inside ``transaction.atomic()``
        on it commits with the caller's rows — or ``None`` when they live outside Django's databases."""

    visibility_timeout_ms: int
    """The lease window: a claim stays invisible this long without a heartbeat (``claim()``'s default),
    and ``driver.operator.workers()`` keeps a registry row this long after its last beat. A worker over the
    driver leases and renews with it (``job_worker()``)."""

    fair_queues: frozenset[str]
    """The queues whose claims serve their orgs in turn (``ULTIMATE_JOBS["FAIR_QUEUES"]``): each claim of
    one takes the due jobs of the orgs least recently served first, each org at most its share of the
    batch, and fills the rest in the queue's own order. Read on every enqueue and claim, so it may be
    set after the driver is built; empty by default."""

    supports_wake: bool
    """Whether :meth:`subscribe` tells a listener the queues that become due. ``False``: the worker and
    the relay find work by polling alone."""

    supports_listen: bool
    """Whether the wake also carries other processes' enqueues (LISTEN/NOTIFY, a Redis stream, a watch on
    the SQLite file) and :meth:`wake_is_live` answers whether it is proven; the idle poll then rises to
    5 s while it is. Only a driver with ``supports_wake`` has it."""

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(queue)`` whenever ``queue`` has due work; answers an unsubscribe. Called only
        when ``supports_wake``."""

    def wake_is_live(self) -> bool:
        """Whether the cross-process wake is proven to deliver right now. Called only when
        ``supports_listen``."""

    @property
    def operator(self) -> OperatorStore | None:
        """The operator's store (reads and operator actions), or ``None`` (then operator calls are
        ``X_NOT_IMPLEMENTED``; the driver still runs jobs)."""

    @property
    def leases(self) -> LeaseStore | None:
        """The fleet-wide lease store, or ``None`` (then a job declaring concurrency cannot run)."""

    @property
    def rates(self) -> RateStore | None:
        """The fleet-wide rate schedules, or ``None`` (then a job declaring a rate limit cannot run)."""

    @property
    def leader(self) -> LeaderStore | None:
        """The leader-election lease rows the scheduler's leader runs on, or ``None`` (then a scheduler on
        this driver needs a leader passed in)."""

    @property
    def scheduler_state(self) -> SchedulerStore | None:
        """The scheduler's watermarks and fires, or ``None`` (then no scheduler runs on this driver)."""

    @property
    def async_enqueue(self) -> AsyncEnqueuer | None:
        """The driver's native async enqueue (``await handle.aenqueue(...)`` with no thread hop), or ``None``
        (then an async enqueue runs the sync one on Django's thread-sensitive thread)."""

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
        visibility_timeout_ms: int | None = None,
        drop_exhausted: frozenset[str] = frozenset(),
        queue_limits: Mapping[str, int] | None = None,
        record: WorkerInfo | None = None,
    ) -> Claim:
        """Take up to ``limit`` due rows of ``queues`` — at most ``queue_limits[q]`` of queue ``q`` when
        given, so one claim serves every queue with a free slot — burying lapsed final attempts on the way
        (failed for the names in ``drop_exhausted``, else dead); answers both (:class:`Claim`).
        With ``record``, also write that worker's registry row (what ``driver.record_worker`` writes)
        in the same round trip, so an idle worker's registry costs no statement of its own."""

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None, wait_ms: int | None = None) -> bool:
        """Settle a running row ``done``, fenced on ``ref``; answers whether it landed. ``duration_ms`` moves the
        job's counters, ``wait_ms`` (from the row's run time to the attempt's start) its queue's waits."""

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

    def save_step_held(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        """:meth:`save_step` inside the caller's transaction on :attr:`alias` (``run.step.atomic``), holding
        the job's row against a new claim until that transaction ends — so the checkpoint and the step's
        writes commit together only while this worker still holds the claim. Answers whether it landed
        (the caller rolls back when it did not). A driver with no alias raises ``X_STEP_ATOMIC_UNSUPPORTED``."""

    def record_progress(self, job_id: str, ref: ClaimRef, progress: Progress) -> bool:
        """Store ``run.progress()`` on a running row, fenced on ``ref`` like every settle; answers whether it
        landed (a miss logs ``jobs.settle.unowned``)."""

    def record_worker(self, info: WorkerInfo) -> None:
        """Upsert a worker's registry row (the whole row, heartbeat included; ``in_flight`` kept to
        ``MAX_WORKER_IN_FLIGHT`` ids) — what ``claim(record=...)`` writes in the claim's own round trip.
        ``operator.workers()`` answers it until one :attr:`visibility_timeout_ms` after its heartbeat."""

    def remove_worker(self, worker_id: str) -> None:
        """Drop a worker's registry row (a clean stop); an unknown id is a no-op."""

    def rollup_counters(self) -> int:
        """Fold every counter bucket past its tier's retention (:data:`COUNTER_TIERS`) into the narrowest
        wider tier whose bucket containing it is still retained — or drop it when none is — in one step,
        at the driver's now: the state folding tier by tier reaches. Idempotent. Answers how many buckets
        were folded or dropped. The scheduler's leader runs it once a minute (``driver.leader.acquire(...,
        rollup=True)``); every driver answers the same buckets and count for the same history."""

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


DECLARED_CAPABILITIES: tuple[tuple[str, str], ...] = (
    ("name", "the driver's name, for messages and the console"),
    ("alias", "the Django database alias its rows live in, or None"),
    ("visibility_timeout_ms", "the lease window in milliseconds"),
    ("fair_queues", "the frozenset of queues whose claims serve their orgs in turn (empty by default)"),
    ("supports_wake", "a bool: whether subscribe(listener) announces due queues"),
    ("supports_listen", "a bool: whether the wake crosses processes and wake_is_live() answers"),
    ("operator", "the operator's store (reads and operator actions), or None"),
    ("leases", "the fleet-wide lease store, or None"),
    ("rates", "the fleet-wide rate schedules, or None"),
    ("leader", "the leader-election lease store, or None"),
    ("scheduler_state", "the scheduler's watermarks, or None"),
    ("backfills", "the backfill ledger, or None"),
    ("async_enqueue", "the native async enqueue (an object with async enqueue_many), or None"),
)
"""Every attribute a driver declares beside its methods, with what it holds: verified by the system check
(:meth:`~ultimate_jobs.contracts.base.BaseDriver.check`, or
:func:`~ultimate_jobs.contracts.base.undeclared_capabilities` for a driver written against the protocol alone)
and the conformance suite, and read plainly — never probed with a default — where it is used.
:class:`~ultimate_jobs.contracts.base.BaseDriver` declares each with its default."""
