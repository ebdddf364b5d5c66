"""The phases of one attempt that the sync and the async executors share (:mod:`.execute`,
:mod:`.execute_async`): finding the declaration, admission (fleet slots, rate keys, the tenant), the
deadline, the run handed to the body, and how a return, a failure or a body's exit is settled. Each
executor strings them together on its own thread or loop; neither imports the other for them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from django.conf import settings

from ..contracts.jobs import ClaimedJob, NackOptions
from ..contracts.protocol import JobDriver
from ..errors import (
    ConcurrencyUnenforceableError,
    JobAbortedError,
    JobBodyExitedError,
    JobKeyBusyError,
    JobTenantMismatchError,
    JobTimeoutError,
    RateLimitUnenforceableError,
    UltimateError,
)
from ..runtime.dbconn import closing_what_it_opens
from . import registry
from .attempt import Attempt
from .clock import Clock, Timer
from .definition import Concurrency, JobHandle
from .installed import event_bus
from .logs import log_event
from .outcomes import JobExecution, job_lease_key, tenant_lease_key
from .rates import RATE_HOLD_MS, RATE_KEEP_MS, RATE_LEAD_MS
from .run import JobRun
from .scope import Actor
from .signals import CancelSignal
from .steps import Step, StepTransactions

KEY_BUSY_RECHECK_MS = 250
UNREGISTERED_RECHECK_MS = 60_000


def _acquire_slot(attempt: Attempt, ttl_ms: int) -> Literal["run", "wait", "refuse"]:
    """Take the fleet slots the run needs — its org's in a queue ``LIMITS["FLEET_PER_TENANT"]`` caps, then its
    job's concurrency key — all or none: ``"run"`` when every one was taken; ``"wait"`` when one is busy
    (the run is handed back uncounted), or ``"refuse"`` for a busy key of ``when_busy="fail"``."""
    handle, claimed = attempt.handle, attempt.claimed
    wanted = _slots_wanted(attempt)
    if not wanted:
        return "run"
    leases = attempt.driver.leases
    if leases is None:
        what = (
            "declares concurrency" if handle.concurrency is not None else f"runs in {claimed.queue!r}, capped per org,"
        )
        raise ConcurrencyUnenforceableError(
            f"{handle.name} {what} and the {attempt.driver.name} driver has no lease store",
            {"job": handle.name, "driver": attempt.driver.name},
        )
    holder = f"{claimed.id}:{claimed.claim}"
    taken: list[str] = []
    for key, limit, concurrency in wanted:
        attempt.lease_key = key
        if leases.acquire(key, holder, limit=limit, ttl_ms=ttl_ms):
            taken.append(key)
            continue
        for held in taken:  # all or none: a run waiting for one slot holds no other
            leases.release(held, holder)
        if concurrency is None or concurrency.when_busy == "wait":
            return "wait"
        others = [h for h in leases.holders(key) if not h.startswith(f"{claimed.id}:")]
        if len(others) < limit:
            return "wait"  # its own leftovers, or a key freed a moment after the acquire: wait one poll
        return "refuse"
    attempt.execution.slot_keys = tuple(taken)  # the runner hears of them once the run starts (admit)
    return "run"


def _rate_wait(attempt: Attempt, clock: Clock) -> int:
    """How long the run must still wait for its start under its rate limit: ``0`` to start now — at once,
    or after waiting in its slot for an instant at most :data:`RATE_HOLD_MS` away, which the take gave it
    (no second take: a round trip queued behind the key's other takers would make the start late) — else
    the ms until the instant reserved for it (the worker keeps the run until then, or it is handed back)."""
    asked_ms = clock.now_ms()
    wait_ms = _take_rate(attempt, asked_ms)
    if wait_ms > RATE_HOLD_MS:
        return wait_ms
    clock.sleep(asked_ms + wait_ms - clock.now_ms())  # its instant is near, and its own: wait for it, then start
    return 0


def _take_rate(attempt: Attempt, now_ms: int) -> int:
    """Take the run's start under its rate limit (``driver.rates``): the ms until the instant it starts on
    (``0``: now) — the run's own to wait for in its slot when at most :data:`RATE_HOLD_MS` away, else a
    reservation it comes back for."""
    handle = attempt.handle
    assert handle.rate_limit is not None
    rates = attempt.driver.rates
    if rates is None:
        raise RateLimitUnenforceableError(
            f"{handle.name} declares a rate limit and the {attempt.driver.name} driver keeps no rate schedules",
            {"job": handle.name, "driver": attempt.driver.name},
        )
    key = handle.derive_rate_key(attempt.parsed)
    assert key is not None
    interval_ms = handle.rate_limit.interval_ms
    return rates.take(key, attempt.claimed.id, interval_ms=interval_ms, now_ms=now_ms, near_ms=RATE_HOLD_MS)


def _slots_wanted(attempt: Attempt) -> list[tuple[str, int, Concurrency | None]]:
    """The fleet slots a run takes, ``(key, limit, its job's concurrency or None)``: its org's cap in its
    queue, when one is set and the run has an org, then its job's concurrency key."""
    handle, claimed = attempt.handle, attempt.claimed
    wanted: list[tuple[str, int, Concurrency | None]] = []
    cap = attempt.env.fleet_per_tenant.get(claimed.queue)
    if cap is not None and attempt.tenant_id is not None:
        wanted.append((tenant_lease_key(claimed.queue, attempt.tenant_id), cap, None))
    concurrency = handle.concurrency
    if concurrency is not None:
        key = job_lease_key(handle.name, handle.derive_concurrency_key(attempt.parsed))
        wanted.append((key, concurrency.limit, concurrency))
    return wanted


def find_handle(claimed: ClaimedJob, handle: JobHandle[Any, Any] | None = None) -> JobHandle[Any, Any] | None:
    """The declaration a claimed row runs: ``handle`` when given, else the registered job of its name (or a
    registry source's, such as a ``django.tasks`` task); ``None`` for a name this process does not know."""
    found = handle or registry.lookup(claimed.name) or registry.resolve_elsewhere(claimed.name)
    return found if isinstance(found, JobHandle) else None


def is_async_job(handle: JobHandle[Any, Any]) -> bool:
    """Whether ``handle``'s body is ``async def`` — run it with :func:`execute_job_async` on a lane."""
    return handle.is_async


def release_slot(attempt: Attempt) -> None:
    """Give back the fleet slots the attempt took, if it took any."""
    leases = attempt.driver.leases
    if leases is not None:
        for key in attempt.execution.slot_keys:
            leases.release(key, f"{attempt.claimed.id}:{attempt.claimed.claim}")


def body_exited(attempt: Attempt, raised: BaseException) -> JobBodyExitedError:
    """The failure of an attempt whose body raised ``raised``, a ``BaseException`` that is not an
    ``Exception`` (``sys.exit()``, ``GeneratorExit``, a stray ``CancelledError``): ``X_JOB_BODY_EXITED``, so
    the retry policy applies and the slot runs the next job."""
    log_event(
        logging.ERROR,
        "jobs.job.body-exited",
        raised=type(raised).__qualname__,
        error=repr(raised),
        **attempt.log_fields(),
    )
    return JobBodyExitedError.of(attempt.handle.name, raised)


def user_interrupt(attempt: Attempt, raised: BaseException) -> JobAbortedError | None:
    """The reason to hand the attempt back uncounted when ``raised`` is the user's Ctrl-C — a
    ``KeyboardInterrupt`` on the main thread (``run_jobs`` in a shell or a test; a worker runs no body there)
    — which then goes on up, as Django's immediate task backend lets it; else ``None``."""
    if not isinstance(raised, KeyboardInterrupt) or threading.current_thread() is not threading.main_thread():
        return None
    return JobAbortedError(
        f"{attempt.handle.name}: interrupted (KeyboardInterrupt); the job goes back to ready uncounted",
        {"job": attempt.handle.name},
    )


def prepare(attempt: Attempt, run_signal: CancelSignal, visibility_timeout_ms: int) -> bool:
    """Everything before the body: parse the input, derive the tenant, take the fleet slot. Answers whether
    the body runs; when it does not, the attempt is settled already (or handed back)."""
    refusal = admit(attempt, run_signal, visibility_timeout_ms)
    if refusal is None:
        return True
    refusal()
    return False


def admit(attempt: Attempt, run_signal: CancelSignal, visibility_timeout_ms: int) -> Callable[[], object] | None:
    """:func:`prepare`'s checks without its settle: ``None`` when the body runs, else the call that settles
    the attempt instead (a driver call: an async attempt makes it off its loop). Makes no driver call
    itself unless the job takes a fleet slot."""
    claimed, handle, clock = attempt.claimed, attempt.handle, attempt.clock
    try:
        attempt.parsed = handle.parse_stored(claimed.input)
        attempt.tenant_id = _run_tenant(handle, attempt.parsed, claimed)
        verdict = _acquire_slot(attempt, visibility_timeout_ms)
        wait_ms = _rate_wait(attempt, clock) if verdict == "run" and handle.rate_limit is not None else 0
    except UltimateError as exc:
        if isinstance(exc, ConcurrencyUnenforceableError):
            raise
        return partial(attempt.settle, attempt.fail, exc)
    except Exception as exc:  # concurrency.key(input), tenant(input) or the rate take threw: the retry path
        return partial(attempt.settle, attempt.fail, exc)
    if verdict == "wait":

        def hand_back() -> None:
            attempt.settle(attempt.hand_back, clock.now_ms() + KEY_BUSY_RECHECK_MS)
            log_event(logging.DEBUG, "jobs.job.key-busy", **attempt.log_fields())

        return hand_back
    if wait_ms > 0:
        release_slot(attempt)  # a run waiting for its start holds no fleet slot meanwhile
        attempt.execution.slot_keys = ()
        instant_ms = clock.now_ms() + wait_ms
        if wait_ms <= RATE_KEEP_MS and attempt.hooks is not None and attempt.hooks.keep(instant_ms):

            def kept() -> None:  # the worker keeps the claim off its slot and brings it back before its instant
                attempt.execution.kept_until_ms = instant_ms
                log_event(logging.DEBUG, "jobs.job.rate-kept", wait_ms=wait_ms, **attempt.log_fields())

            return kept
        due_ms = clock.now_ms() + max(1, wait_ms - RATE_LEAD_MS)  # claimed again a little ahead of its instant

        def rate_limited() -> None:
            attempt.settle(attempt.hand_back, due_ms)
            log_event(logging.DEBUG, "jobs.job.rate-limited", wait_ms=wait_ms, **attempt.log_fields())

        return rate_limited
    if verdict == "run" and attempt.hooks is not None:  # the slots it holds, for the heartbeat to renew
        for key in attempt.execution.slot_keys:
            attempt.hooks.slot_taken(key, f"{claimed.id}:{claimed.claim}")
    if verdict == "refuse":
        error = JobKeyBusyError(
            f"{handle.name}: its concurrency key already holds {handle.concurrency.limit if handle.concurrency else 0} "
            f"run(s); the body never ran. Fix: python manage.py jobs list --name {handle.name} --state running --json",
            {"job": handle.name, "key": attempt.lease_key},
        )
        return partial(attempt.settle, attempt.refuse, error)
    if run_signal.reason is not None:
        # cancelled between the claim and the start (a drain's accept phase): never start the body —
        # settle by the signal's verdict, so a drained run goes back uncounted
        return partial(after_abort_or, attempt, run_signal, attempt.fail, run_signal.reason)
    return None


def arm_deadline(attempt: Attempt, run_signal: CancelSignal, *, settle: bool) -> Timer | None:
    """Arm the job's ``timeout`` on the attempt's clock: at the deadline the run's signal aborts with
    ``X_JOB_TIMEOUT`` — and, with ``settle``, the attempt fails there and then, from the timer's thread (an
    async attempt settles it from its loop instead, through the lane's offload)."""
    handle = attempt.handle
    if handle.timeout_ms is None:
        return None
    timeout_ms = handle.timeout_ms

    def on_deadline() -> None:
        error = JobTimeoutError(
            f"{handle.name}: the attempt passed its timeout of {timeout_ms} ms; read run.signal to stop in time",
            {"job": handle.name, "timeout_ms": timeout_ms},
        )
        attempt.timed_out_at = attempt.clock.now_ms()
        if not settle:
            run_signal.abort(error)
            return
        with closing_what_it_opens():  # the clock's timer thread: no role closes its sessions later
            run_signal.abort(error)
            attempt.settle(attempt.fail, error)

    return attempt.clock.call_at(attempt.started + timeout_ms, on_deadline)


def step_options(attempt: Attempt, run_signal: CancelSignal) -> dict[str, Any]:
    """What the run's step runner is built from."""
    claimed, handle = attempt.claimed, attempt.handle
    return {
        "job_id": claimed.id,
        "ref": claimed.ref,
        "completed": claimed.steps,
        "save": lambda record: attempt.driver.save_step(claimed.id, claimed.ref, record),
        "signal": run_signal,
        "clock": attempt.clock,
        "bus": event_bus,
        "step_timeout_ms": handle.step_timeout_ms,
        "event_poll_ms": handle.event_poll_ms,
        "secrets": lambda: attempt.secrets,
        "transactions": StepTransactions(
            attempt.driver.alias,
            attempt.driver.name,
            lambda record: attempt.driver.save_step_held(claimed.id, claimed.ref, record),
        ),
    }


def job_run_for(
    attempt: Attempt,
    run_signal: CancelSignal,
    make_step: Callable[[], Step],
    progress: Callable[[float, float | None, str | None], None],
) -> JobRun[Any]:
    """The one argument the body receives; its step runner is ``make_step()``, built when the body first
    reads ``run.step``."""
    claimed = attempt.claimed
    return JobRun(
        input=attempt.parsed,
        _make_step=make_step,
        ctx=attempt.context,
        attempt=claimed.attempt,
        final_attempt=attempt.final,
        job_id=claimed.id,
        run_id=claimed.run_id,
        signal=run_signal,
        name=claimed.name,
        queue=claimed.queue,
        actor=Actor(org_id=attempt.tenant_id),
        _progress=progress,
    )


def returned(attempt: Attempt, run_signal: CancelSignal, result: Any) -> None:
    """Settle an attempt whose body returned ``result``: completed — unless its timeout fired first (the
    deadline's verdict stands and the late return is logged ``jobs.timeout.abandoned``)."""
    reason = run_signal.reason
    if attempt.settled or (reason is not None and reason.code == "X_JOB_TIMEOUT"):
        if reason is not None:
            attempt.settle(attempt.fail, reason)  # the deadline's own settle may not have landed yet
        attempt.execution.abandoned = True
        log_event(logging.WARNING, "jobs.timeout.abandoned", **attempt.log_fields())
        return
    try:
        attempt.settle(attempt.complete, result)
    except Exception as exc:  # an ack that raised (a driver fault): the lease lapses and the queue redelivers
        log_event(logging.ERROR, "jobs.settle.failed", error=repr(exc), **attempt.log_fields())
        raise


def after_abort_or(attempt: Attempt, run_signal: CancelSignal, settle: Callable[[Any], None], arg: Any) -> None:
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
            f"{handle.name}: the payload's org differs from the org the row is queued under ({claimed.tenant_id}); "
            "the row cannot run as either — enqueue the work again with an input of the row's org",
            {"job": handle.name, "row_org": claimed.tenant_id},
        )
    return derived


UNKNOWN_JOB_FIX = "deploy the module that declares this job to the worker, or remove the row"
UNKNOWN_JOB_DEV_FIX = (
    "; in development (DEBUG on) a worker knows only the jobs declared when it started: restart it, or run "
    "python manage.py jobs_dev --reload, which restarts the roles when a Python file changes"
)
"""What :data:`UNKNOWN_JOB_FIX` adds with ``DEBUG`` on: a job added while the worker runs needs a restart."""


def _unknown_job_fix() -> str:
    return UNKNOWN_JOB_FIX + (UNKNOWN_JOB_DEV_FIX if settings.DEBUG else "")


def hand_back_unknown(claimed: ClaimedJob, driver: JobDriver, clock: Clock) -> JobExecution:
    log_event(
        logging.ERROR,
        "jobs.job.unregistered",
        job_id=claimed.id,
        name=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        fix=_unknown_job_fix(),
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
