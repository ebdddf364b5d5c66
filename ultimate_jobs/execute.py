"""One attempt of one claimed job → one :class:`JobExecution`.

The outcome table (spec "The deadline cancels"):

=================================================  ==============  ========  ==========
the attempt ended by                               outcome         counted   jobs_total
=================================================  ==============  ========  ==========
the body returning                                 completed       —         ok
step.sleep / step.wait_for_event                   suspended       no        —
the body throwing, attempts left                   retried         yes       failed
the body throwing, none left or terminal           dead-lettered   yes       dead
the same, with retry dead_letter=False             dropped         yes       failed
the worker's drain (X_DRAINING on the signal)      interrupted     no        —
when_busy="fail" over a busy concurrency key       refused         no        failed
=================================================  ==============  ========  ==========

A cancelled attempt's verdict is read off its signal, never off whatever the body raised.
"""

from __future__ import annotations

import logging
import random
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, Literal, Protocol
from urllib.parse import quote

from . import registry
from .admission import check_progress
from .clock import Clock
from .conf import job_clock
from .context import Actor, acting_as
from .definition import JobHandle
from .drivers.base import (
    LEASE_LAPSED_FINAL_ATTEMPT,
    PROGRESS_INTERVAL_MS,
    ClaimedJob,
    ClaimRef,
    ExhaustedJob,
    JobDriver,
    JobOutcome,
    NackOptions,
    Progress,
)
from .errors import (
    ConcurrencyUnenforceableError,
    JobKeyBusyError,
    JobOnSettledFailedError,
    JobTenantMismatchError,
    JobTimeoutError,
    UltimateError,
    code_of,
    retry_after_seconds_of,
    retry_class,
)
from .events import event_bus
from .logs import log_event
from .redaction import scrub, secret_values
from .retry import backoff_ms, is_final_attempt, retry_after_delay_ms
from .run import JobRun
from .signals import CancelSignal, signal_scope
from .steps import Step, StepSuspension
from .tracing import job_span

ON_SETTLED_ATTEMPTS = 3
KEY_BUSY_RECHECK_MS = 250
UNREGISTERED_RECHECK_MS = 60_000

StopReason = Literal["terminal", "attempts-exhausted"]
ENDINGS: frozenset[JobOutcome] = frozenset({"completed", "dead-lettered", "dropped", "refused"})


class Acker(Protocol):
    """What settles a completed attempt: the driver itself, or the worker's batcher over ``ack_many``."""

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None) -> bool:
        """Settle the row ``done``, fenced on ``ref``; answers whether it landed."""


class DeferredAcker(Acker, Protocol):
    """An acker that can also settle later: the worker's settle buffer."""

    def ack_later(
        self,
        job_id: str,
        ref: ClaimRef,
        *,
        duration_ms: int | None,
        then: Callable[[bool, BaseException | None], None],
    ) -> None:
        """Queue the row to settle ``done``; ``then(landed, error)`` runs once the settle came back."""


class ExecutionHooks(Protocol):
    """What the worker hears from inside an attempt."""

    def slot_taken(self, key: str, holder: str) -> None:
        """The run holds fleet slot ``key`` as ``holder`` until the attempt ends."""

    def settling(self) -> None:
        """The attempt is about to settle its row; the lease is no longer the worker's to renew."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What ``on_settled`` is told, once per ending: the outcome, the input (``None`` when the stored
    payload no longer parses), the body's ``result`` (completed only), the ``error`` and its ``code``."""

    outcome: JobOutcome
    job_id: str
    run_id: str
    name: str
    attempt: int
    input: Any
    result: Any = None
    error: str | None = None
    code: str | None = None
    ctx: Any = None
    tenant_id: str | None = None


@dataclass(slots=True)
class JobExecution:
    """How one attempt ended. ``outcome`` is ``None`` when the claim was handed back without running
    (a busy key under ``when_busy="wait"``, a job this process does not know)."""

    job_id: str
    name: str
    queue: str
    attempt: int
    final_attempt: bool
    outcome: JobOutcome | None = None
    landed: bool = False
    result: Any = None
    error: BaseException | None = None
    code: str | None = None
    stop_reason: StopReason | None = None
    resume_at_ms: int | None = None
    duration_ms: int = 0
    abandoned: bool = False
    on_settled_error: UltimateError | None = None
    slot_key: str | None = field(default=None, repr=False)
    deferred: bool = False
    """The completion was handed to a settle buffer: ``landed`` is known only once ``settled_later`` ran."""


def job_lease_key(name: str, key: str | None = None) -> str:
    """The fleet slot a run counts under: ``job:<name>`` for a plain cap, ``job-key:<encoded name>:<key>``
    for a keyed one — apart, so no job name can collide with another job's key."""
    return f"job:{name}" if key is None else f"job-key:{quote(name, safe='')}:{key}"


class _Attempt:
    """The state of one attempt, shared by the body's thread and the deadline timer."""

    def __init__(
        self,
        claimed: ClaimedJob,
        handle: JobHandle[Any, Any],
        driver: JobDriver,
        clock: Clock,
        context: Any,
        rng: random.Random | None,
    ) -> None:
        self.claimed = claimed
        self.handle = handle
        self.driver = driver
        self.clock = clock
        self.context = context
        self.rng = rng
        self.hooks: ExecutionHooks | None = None
        self.acker: Acker | None = None
        self.settled_later: Callable[[JobExecution], None] | None = None
        self.lease_key: str | None = None  # the fleet slot this run asked for (held or busy)
        self.started = clock.now_ms()
        self.final = is_final_attempt(handle.retry, claimed.attempt)
        self.execution = JobExecution(
            job_id=claimed.id, name=claimed.name, queue=claimed.queue, attempt=claimed.attempt, final_attempt=self.final
        )
        self.parsed: Any = None
        self.tenant_id: str | None = None
        self._settle_lock = threading.Lock()
        self._settle_done = threading.Event()
        self._settled = False
        self._progress_last = -PROGRESS_INTERVAL_MS
        self._progress_pending: Progress | None = None

    @cached_property
    def secrets(self) -> frozenset[str]:
        """The clear values of the input's sealed secrets (those this site's keys open)."""
        return frozenset(secret_values(self.claimed.input))

    def scrub(self, text: str) -> str:
        """``text`` with every secret of the job's input (``SecretStr`` fields) masked: an error message
        that quotes a secret must not carry it into logs or ``on_settled``."""
        return str(scrub(text, self.secrets)) if self.secrets else text

    def _fields(self) -> dict[str, Any]:
        c = self.claimed
        return {"job_id": c.id, "name": c.name, "queue": c.queue, "attempt": c.attempt, "run_id": c.run_id}

    # -- progress ------------------------------------------------------------------------------

    def progress(self, done: float, total: float | None, note: str | None) -> None:
        now = self.clock.now_ms()
        check_progress(done, total, note)  # refused at the call, where the body can see why
        if note is not None:
            note = self.scrub(note)  # stored and shown on every operator surface: never a secret in clear
        self._progress_pending = Progress(done=done, total=total, note=note, at_ms=now)
        if now - self._progress_last >= PROGRESS_INTERVAL_MS:
            self._flush_progress()

    def _flush_progress(self) -> None:
        pending, self._progress_pending = self._progress_pending, None
        introspect = self.driver.introspect
        if pending is None or introspect is None:
            return
        self._progress_last = pending.at_ms
        introspect.record_progress(self.claimed.id, self.claimed.ref, pending)

    # -- settling ------------------------------------------------------------------------------

    def settle(self, fn: Callable[..., None], *args: Any) -> bool:
        """Run ``fn(*args)`` (which settles the row) unless another path settled first."""
        with self._settle_lock:
            if self._settled:
                return False
            self._settled = True
        try:
            if self.hooks is not None:
                self.hooks.settling()
            self._flush_progress()
            fn(*args)
        finally:
            self._settle_done.set()
        return True

    @property
    def settled(self) -> bool:
        return self._settled

    def complete(self, result: Any) -> None:
        ex = self.execution
        ex.duration_ms = self.clock.now_ms() - self.started
        ex.outcome, ex.result = "completed", result
        acker = self.acker or self.driver
        later = self.settled_later
        ack_later = getattr(acker, "ack_later", None)
        if later is not None and ack_later is not None and self.handle.on_settled is None:
            # nobody waits on this settle inside the attempt: the slot moves on, the buffer settles it
            ex.deferred = True
            ack_later(self.claimed.id, self.claimed.ref, duration_ms=ex.duration_ms, then=self._completed_later)
            return
        ex.landed = acker.ack(self.claimed.id, self.claimed.ref, duration_ms=ex.duration_ms)
        log_event(logging.INFO, "jobs.job.completed", duration_ms=ex.duration_ms, landed=ex.landed, **self._fields())

    def _completed_later(self, landed: bool, error: BaseException | None) -> None:
        ex = self.execution
        ex.landed = landed
        if error is not None:  # the lease lapses and the queue redelivers the row (at-least-once)
            ex.outcome, ex.result, ex.error = None, None, error  # counted by nothing: the redelivery counts
            log_event(logging.ERROR, "jobs.settle.failed", error=repr(error), **self._fields())
        else:
            log_event(logging.INFO, "jobs.job.completed", duration_ms=ex.duration_ms, landed=landed, **self._fields())
        assert self.settled_later is not None
        self.settled_later(ex)

    def suspend(self, suspension: StepSuspension) -> None:
        ex = self.execution
        ex.duration_ms = self.clock.now_ms() - self.started
        options = NackOptions(park=True, count_attempt=False, run_at_ms=suspension.resume_at_ms)
        ex.landed = self.driver.nack(self.claimed.id, self.claimed.ref, options)
        ex.outcome, ex.resume_at_ms = "suspended", suspension.resume_at_ms
        log_event(
            logging.INFO,
            "jobs.job.suspended",
            step=suspension.step,
            resume_at_ms=suspension.resume_at_ms,
            **self._fields(),
        )

    def interrupt(self, reason: UltimateError) -> None:
        ex = self.execution
        ex.duration_ms = self.clock.now_ms() - self.started
        now = self.clock.now_ms()
        options = NackOptions(error=_describe(reason), code=reason.code, count_attempt=False, run_at_ms=now)
        ex.landed = self.driver.nack(self.claimed.id, self.claimed.ref, options)
        ex.outcome, ex.error, ex.code, ex.resume_at_ms = "interrupted", reason, reason.code, now
        log_event(logging.WARNING, "jobs.job.interrupted", reason=reason.code, **self._fields())

    def hand_back(self, run_at_ms: int) -> None:
        """Give the claim back unrun and uncounted (a busy key under ``when_busy="wait"``)."""
        options = NackOptions(count_attempt=False, run_at_ms=run_at_ms)
        self.execution.landed = self.driver.nack(self.claimed.id, self.claimed.ref, options)
        self.execution.resume_at_ms = run_at_ms

    def refuse(self, error: UltimateError) -> None:
        ex = self.execution
        options = NackOptions(error=self.scrub(_describe(error)), code=error.code, fail=True, count_attempt=False)
        ex.landed = self.driver.nack(self.claimed.id, self.claimed.ref, options)
        ex.outcome, ex.error, ex.code = "refused", error, error.code
        log_event(logging.WARNING, "jobs.job.refused", code=error.code, **self._fields())

    def fail(self, error: BaseException) -> None:
        ex = self.execution
        ex.duration_ms = self.clock.now_ms() - self.started
        policy = self.handle.retry
        classified = retry_class(error)
        stop: StopReason | None = None
        if classified == "terminal":
            stop = "terminal"
        elif self.final:
            stop = "attempts-exhausted"
        text = self.scrub(_describe(error))
        code = code_of(error)
        if stop is None:
            seconds = retry_after_seconds_of(error) if classified == "retry-after" else None
            if seconds is not None:
                delay = retry_after_delay_ms(policy, seconds, self.rng)
            else:
                delay = backoff_ms(policy, self.claimed.attempt, self.rng)
            run_at = self.clock.now_ms() + delay
            options = NackOptions(error=text, code=code, run_at_ms=run_at, duration_ms=ex.duration_ms)
            ex.outcome, ex.resume_at_ms = "retried", run_at
        else:
            verdict = (
                f"[{stop}] stopped on attempt {self.claimed.attempt} of {policy.attempts}"
                + (" — a terminal code spends no further attempts" if stop == "terminal" else "")
                + (" (X_JOB_MAX_ATTEMPTS)" if stop == "attempts-exhausted" else "")
            )
            text = f"{text}\n{verdict}"
            if policy.dead_letter:
                options = NackOptions(error=text, code=code, dead_letter=True, duration_ms=ex.duration_ms)
                ex.outcome = "dead-lettered"
            else:
                options = NackOptions(error=text, code=code, fail=True, duration_ms=ex.duration_ms)
                ex.outcome = "dropped"
        ex.landed = self.driver.nack(self.claimed.id, self.claimed.ref, options)
        ex.error, ex.code, ex.stop_reason = error, code, stop
        log_event(
            logging.WARNING if stop is None else logging.ERROR,
            "jobs.attempt.failed",
            code=code,
            stop=stop,
            outcome=ex.outcome,
            landed=ex.landed,
            error=self.scrub(str(error)),
            **self._fields(),
        )

    # -- on_settled ----------------------------------------------------------------------------

    def tell(self) -> None:
        if self._settled:
            self._settle_done.wait()  # the deadline's settle may still be on the wire in the timer's thread
        ex = self.execution
        if ex.outcome not in ENDINGS or not ex.landed:
            return
        settled = Settled(
            outcome=ex.outcome,
            job_id=self.claimed.id,
            run_id=self.claimed.run_id,
            name=self.claimed.name,
            attempt=self.claimed.attempt,
            input=self.parsed,
            result=ex.result,
            error=None if ex.error is None else self.scrub(_describe(ex.error)),
            code=ex.code,
            ctx=self.context,
            tenant_id=self.tenant_id,
        )
        ex.on_settled_error = run_on_settled(self.handle, settled, self.tenant_id, scrub_text=self.scrub)


def run_on_settled(
    handle: JobHandle[Any, Any],
    settled: Settled,
    tenant_id: str | None,
    *,
    scrub_text: Callable[[str], str] = lambda text: text,
) -> UltimateError | None:
    """Tell ``handle.on_settled`` how the run ended: up to 3 tries back to back, under the job's tenant.
    A hook that keeps throwing is logged ``jobs.on-settled.failed`` and answered, never raised; its
    error text passes ``scrub_text`` first (the job's secrets masked — a hook may quote its input)."""
    hook = handle.on_settled
    if hook is None:
        return None
    last: Exception | None = None
    for _ in range(ON_SETTLED_ATTEMPTS):
        try:
            with acting_as(Actor(org_id=tenant_id)):
                hook(settled)
            return None
        except Exception as exc:
            last = exc
    error = JobOnSettledFailedError(
        scrub_text(f"{handle.name}: on_settled threw on all {ON_SETTLED_ATTEMPTS} tries: {last!r}"),
        {"job": handle.name, "job_id": settled.job_id, "outcome": settled.outcome},
    )
    log_event(
        logging.ERROR,
        "jobs.on-settled.failed",
        job_id=settled.job_id,
        name=handle.name,
        outcome=settled.outcome,
        code=error.code,
        error=scrub_text(repr(last)),
    )
    return error


def _scrub_text(secrets: set[str], text: str) -> str:
    return str(scrub(text, secrets))


def _describe(error: BaseException) -> str:
    code = code_of(error)
    head = f"{code}: {getattr(error, 'message', str(error))}" if code else f"{type(error).__name__}: {error}"
    tb = "".join(traceback.format_exception(error)).rstrip()
    return f"{head}\n{tb}"


def _acquire_slot(attempt: _Attempt, ttl_ms: int) -> Literal["run", "wait", "refuse"]:
    handle, claimed = attempt.handle, attempt.claimed
    concurrency = handle.concurrency
    if concurrency is None:
        return "run"
    leases = attempt.driver.leases
    if leases is None:
        raise ConcurrencyUnenforceableError(
            f"{handle.name} declares concurrency and the {attempt.driver.name} driver has no lease store",
            {"job": handle.name, "driver": attempt.driver.name},
        )
    key = job_lease_key(handle.name, handle.derive_concurrency_key(attempt.parsed))
    attempt.lease_key = key
    holder = f"{claimed.id}:{claimed.claim}"
    if leases.acquire(key, holder, limit=concurrency.limit, ttl_ms=ttl_ms):
        attempt.execution.slot_key = key
        if attempt.hooks is not None:
            attempt.hooks.slot_taken(key, holder)
        return "run"
    if concurrency.when_busy == "wait":
        return "wait"
    holders = leases.holders(key)
    others = [h for h in holders if not h.startswith(f"{claimed.id}:")]
    if len(others) < concurrency.limit:
        return "wait"  # its own leftovers, or a key freed a moment after the acquire: wait one poll
    return "refuse"


def execute_job(
    claimed: ClaimedJob,
    *,
    driver: JobDriver,
    context: Callable[[], Any] | None = None,
    clock: Clock | None = None,
    signal: CancelSignal | None = None,
    handle: JobHandle[Any, Any] | None = None,
    visibility_timeout_ms: int = 30_000,
    rng: random.Random | None = None,
    hooks: ExecutionHooks | None = None,
    acker: Acker | None = None,
    settled_later: Callable[[JobExecution], None] | None = None,
) -> JobExecution:
    """Run one attempt of ``claimed`` and settle it through ``driver``: one :class:`JobExecution`.

    ``signal`` is the worker's abort line into the run (drain, cancel, lease loss); the job's own
    ``timeout`` is armed here on ``clock``: it aborts the run's signal and fails the attempt at once,
    and a body that returns after that is logged ``jobs.timeout.abandoned``. ``acker`` settles a
    completed attempt (the worker's batcher; by default the driver). ``hooks`` tell the worker when
    the run takes a fleet slot (so its heartbeat renews it) and when the settle begins (so a renewal
    already on the wire that comes back unowned is not reported as a lost lease).

    With ``settled_later`` and an ``acker`` that has ``ack_later`` (the worker's settle buffer), a
    completion of a job without ``on_settled`` is not waited for: the execution comes back with
    ``deferred=True`` and ``settled_later(execution)`` runs once the settle landed (or failed).
    """
    clock = clock or job_clock()
    found = handle or registry.lookup(claimed.name)
    if not isinstance(found, JobHandle):
        return _hand_back_unknown(claimed, driver, clock)
    ctx = context() if context is not None else None
    attempt = _Attempt(claimed, found, driver, clock, ctx, rng)
    attempt.hooks = hooks
    attempt.acker = acker
    attempt.settled_later = settled_later
    run_signal = signal.child() if signal is not None else CancelSignal()
    with job_span(claimed, attempt.execution):  # the child of the enqueue's span (a no-op without OTel)
        try:
            _run(attempt, run_signal, visibility_timeout_ms)
        finally:
            if attempt.execution.slot_key is not None and driver.leases is not None:
                driver.leases.release(attempt.execution.slot_key, f"{claimed.id}:{claimed.claim}")
        attempt.tell()
    return attempt.execution


def _run(attempt: _Attempt, run_signal: CancelSignal, visibility_timeout_ms: int) -> None:
    claimed, handle, clock = attempt.claimed, attempt.handle, attempt.clock
    try:
        attempt.parsed = handle.parse_stored(claimed.input)
        attempt.tenant_id = _run_tenant(handle, attempt.parsed, claimed)
        verdict = _acquire_slot(attempt, visibility_timeout_ms)
    except UltimateError as exc:
        if isinstance(exc, ConcurrencyUnenforceableError):
            raise
        attempt.settle(attempt.fail, exc)
        return
    except Exception as exc:  # concurrency.key(input) or tenant(input) threw: the ordinary retry path
        attempt.settle(attempt.fail, exc)
        return
    if verdict == "wait":
        attempt.settle(attempt.hand_back, clock.now_ms() + KEY_BUSY_RECHECK_MS)
        log_event(logging.DEBUG, "jobs.job.key-busy", **attempt._fields())
        return
    if verdict == "refuse":
        error = JobKeyBusyError(
            f"{handle.name}: its concurrency key already holds {handle.concurrency.limit if handle.concurrency else 0} "
            f"run(s); the body never ran. Fix: python manage.py jobs list --name {handle.name} --state running --json",
            {"job": handle.name, "key": attempt.lease_key},
        )
        attempt.settle(attempt.refuse, error)
        return
    if run_signal.reason is not None:
        # cancelled between the claim and the start (a drain's accept phase): never start the body —
        # settle by the signal's verdict, so a drained run goes back uncounted
        _after_abort_or(attempt, run_signal, attempt.fail, run_signal.reason)
        return

    timer = None
    if handle.timeout_ms is not None:
        deadline = attempt.started + handle.timeout_ms
        timeout_ms = handle.timeout_ms

        def on_deadline() -> None:
            error = JobTimeoutError(
                f"{handle.name}: the attempt passed its timeout of {timeout_ms} ms; read run.signal to stop in time",
                {"job": handle.name, "timeout_ms": timeout_ms},
            )
            run_signal.abort(error)
            attempt.settle(attempt.fail, error)

        timer = clock.call_at(deadline, on_deadline)

    actor = Actor(org_id=attempt.tenant_id)
    step = Step(
        job_id=claimed.id,
        ref=claimed.ref,
        completed=claimed.steps,
        save=lambda record: attempt.driver.save_step(claimed.id, claimed.ref, record),
        signal=run_signal,
        clock=clock,
        bus=event_bus,
        step_timeout_ms=handle.step_timeout_ms,
        event_poll_ms=handle.event_poll_ms,
        secrets=attempt.secrets,
    )
    job_run: JobRun[Any] = JobRun(
        input=attempt.parsed,
        step=step,
        ctx=attempt.context,
        attempt=claimed.attempt,
        final_attempt=attempt.final,
        job_id=claimed.id,
        run_id=claimed.run_id,
        signal=run_signal,
        name=claimed.name,
        queue=claimed.queue,
        actor=actor,
        _progress=attempt.progress,
    )
    try:
        with acting_as(actor), signal_scope(run_signal):
            result = handle.fn(job_run)
    except StepSuspension as suspension:
        _after_abort_or(attempt, run_signal, attempt.suspend, suspension)
        return
    except Exception as exc:
        _after_abort_or(attempt, run_signal, attempt.fail, exc)
        return
    finally:
        if timer is not None:
            timer.cancel()
    reason = run_signal.reason
    if attempt.settled or (reason is not None and reason.code == "X_JOB_TIMEOUT"):
        if reason is not None:
            attempt.settle(attempt.fail, reason)  # the deadline's own settle may not have landed yet
        attempt.execution.abandoned = True
        log_event(logging.WARNING, "jobs.timeout.abandoned", **attempt._fields())
        return
    try:
        attempt.settle(attempt.complete, result)
    except Exception as exc:  # an ack that raised (a driver fault): the lease lapses and the queue redelivers
        log_event(logging.ERROR, "jobs.settle.failed", error=repr(exc), **attempt._fields())
        raise


def _after_abort_or(attempt: _Attempt, run_signal: CancelSignal, settle: Callable[[Any], None], arg: Any) -> None:
    """Settle by the signal's verdict when the attempt was cancelled, else by what the body did."""
    reason = run_signal.reason
    if reason is None:
        attempt.settle(settle, arg)
        return
    if attempt.settled:
        return  # the deadline settled it already
    if reason.code == "X_DRAINING":
        attempt.settle(attempt.interrupt, reason)
        return
    attempt.settle(attempt.fail, reason)


def _run_tenant(handle: JobHandle[Any, Any], parsed: Any, claimed: ClaimedJob) -> str | None:
    derived = handle.derive_tenant(parsed)
    if derived is not None and claimed.tenant_id is not None and derived != claimed.tenant_id:
        raise JobTenantMismatchError(
            f"{handle.name}: the payload names org {derived}, the row is queued under {claimed.tenant_id}",
            {"job": handle.name, "payload_org": derived, "row_org": claimed.tenant_id},
        )
    return derived


def _hand_back_unknown(claimed: ClaimedJob, driver: JobDriver, clock: Clock) -> JobExecution:
    log_event(
        logging.ERROR,
        "jobs.job.unregistered",
        job_id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        fix="deploy the module that declares this job to the worker, or remove the row",
    )
    options = NackOptions(count_attempt=False, run_at_ms=clock.now_ms() + UNREGISTERED_RECHECK_MS)
    landed = driver.nack(claimed.id, claimed.ref, options)
    return JobExecution(
        job_id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        final_attempt=False,
        landed=landed,
        resume_at_ms=options.run_at_ms,
    )


def announce_exhausted(rows: list[ExhaustedJob], *, context: Callable[[], Any] | None = None) -> None:
    """What a claim round does with rows its claim buried: ``jobs.claim.exhausted`` at error, and the
    job's ``on_settled`` (dead-lettered, or dropped for ``dead_letter=False``), ``code=None``."""
    for row in rows:
        log_event(
            logging.ERROR,
            "jobs.claim.exhausted",
            job_id=row.id,
            name=row.name,
            queue=row.queue,
            attempt=row.attempt,
            state=row.state,
            error=LEASE_LAPSED_FINAL_ATTEMPT,
        )
        handle = registry.lookup(row.name)
        if not isinstance(handle, JobHandle):
            continue
        try:
            parsed = handle.parse_stored(row.input)
        except UltimateError:
            parsed = None
        settled = Settled(
            outcome="dead-lettered" if row.state == "dead" else "dropped",
            job_id=row.id,
            run_id=row.run_id,
            name=row.name,
            attempt=row.attempt,
            input=parsed,
            error=LEASE_LAPSED_FINAL_ATTEMPT,
            code=None,
            ctx=context() if context is not None else None,
            tenant_id=row.tenant_id,
        )
        secrets = secret_values(row.input)
        run_on_settled(
            handle,
            settled,
            row.tenant_id if handle.tenant != "none" else None,
            scrub_text=partial(_scrub_text, secrets),
        )


def drop_exhausted_names() -> frozenset[str]:
    """The registered jobs declaring ``retry dead_letter=False`` — the claim buries their rows failed."""
    return frozenset(h.name for h in registry.registered("job") if isinstance(h, JobHandle) and not h.retry.dead_letter)
