"""One attempt of an ``async def`` body → one :class:`JobExecution`, on an event loop.

The same attempt as :func:`~ultimate_jobs.core.execute.execute_job` — the same outcomes, the same settle
rules, the same pieces (``admit``, ``arm_deadline``, ``after_abort_or``, ``returned``) — with the body
awaited in the attempt's own task on the lane's loop. What touches no database runs on the loop: building
the attempt (unless the app has a context factory), parsing the input, deriving the tenant, and the
settle of a completion left to the runner's settle buffer (an ``Ack`` handed over). Every call that does
reach the database (a fleet slot, a refusal's or a failure's settle, progress, a plain ``on_settled``, the
context factory) goes through ``lane.offload``, never on the loop.

When the run's signal aborts — the job's timeout, an operator cancel, a lost lease, the worker's drain —
the attempt's task is cancelled (``CancelledError`` at the body's next ``await``; the attempt takes the
cancel back once the body unwound) and the attempt is settled by the signal's verdict, exactly as a sync
body's is. A timeout settles at once, in a task of its own, before the body has unwound. A cancel that is
not the run's own (the lane stopping past the drain deadline) propagates: the lease lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..contracts.jobs import ClaimedJob
from ..errors import UltimateError
from ..runtime.async_lane import AsyncLane
from .attempt import Attempt
from .definition import JobHandle
from .installed import job_clock
from .logs import log_event
from .outcomes import AttemptEnv, ExecutionHooks, JobExecution, no_context
from .phases import (
    admit,
    after_abort_or,
    arm_deadline,
    body_exited,
    find_handle,
    hand_back_unknown,
    job_run_for,
    prepare,
    release_slot,
    returned,
    step_options,
    user_interrupt,
)
from .scope import enter_scope, leave_scope
from .signals import CancelSignal, enter_signal, leave_signal
from .steps import AsyncStep, StepSuspension
from .tracing import job_span

__all__ = ["execute_job_async"]


async def execute_job_async(
    claimed: ClaimedJob,
    env: AttemptEnv,
    *,
    lane: AsyncLane,
    signal: CancelSignal | None = None,
    hooks: ExecutionHooks | None = None,
    handle: JobHandle[Any, Any] | None = None,
) -> JobExecution:
    """Run one attempt of ``claimed`` — an ``async def`` body — on ``lane``'s loop and settle it through
    ``env.driver``: :func:`~ultimate_jobs.core.execute.execute_job`'s contract (``signal``, ``hooks``,
    ``handle``, ``env.leave_completions``), awaited. Call it on the lane (``lane.submit`` /
    ``lane.run_here``): its driver calls go through ``lane.offload``.

    >>> future = lane.submit(lambda: execute_job_async(claimed, env, lane=lane, signal=flight.signal))
    >>> future.result().outcome
    'completed'
    """
    found = find_handle(claimed, handle)
    if found is None:
        return await lane.offload(hand_back_unknown, claimed, env.driver, env.clock or job_clock())
    if env.context is None or env.context is no_context:
        attempt = Attempt(claimed, found, env, hooks)
    else:  # the app's context factory may read the DB
        attempt = await lane.offload(Attempt, claimed, found, env, hooks)
    run_signal = signal.child() if signal is not None else CancelSignal()
    with job_span(claimed, attempt.execution):  # the child of the enqueue's span (a no-op without OTel)
        try:
            await _run(attempt, run_signal, env.visibility_timeout_ms, lane)
        finally:
            if attempt.execution.slot_keys:
                await lane.offload(release_slot, attempt)
        if found.on_settled is not None:
            await attempt.atell(lane.offload)
    return attempt.execution


async def _prepare(attempt: Attempt, run_signal: CancelSignal, visibility_timeout_ms: int, lane: AsyncLane) -> bool:
    """:func:`prepare` from the loop: parsing the input and deriving the tenant touch no database, so a job
    without a fleet slot to take is checked on the loop itself; a settle it calls for goes off the loop."""
    handle = attempt.handle
    if (
        handle.concurrency is not None
        or handle.rate_limit is not None
        or attempt.claimed.queue in attempt.env.fleet_per_tenant
    ):
        # a fleet slot's lease and a rate take are driver calls
        return await lane.offload(prepare, attempt, run_signal, visibility_timeout_ms)
    refusal = admit(attempt, run_signal, visibility_timeout_ms)
    if refusal is None:
        return True
    await lane.offload(refusal)
    return False


def _settles_in_memory(attempt: Attempt, run_signal: CancelSignal) -> bool:
    """Whether the body's return settles without a driver call: its completion is left to the runner's
    settle buffer, no ``on_settled`` waits on it, no progress is pending and no deadline fired."""
    return (
        attempt.env.leave_completions
        and attempt.handle.on_settled is None
        and not attempt.progress_pending
        and run_signal.reason is None
        and not attempt.settled
    )


async def _run(attempt: Attempt, run_signal: CancelSignal, visibility_timeout_ms: int, lane: AsyncLane) -> None:
    if not await _prepare(attempt, run_signal, visibility_timeout_ms, lane):
        return
    timer = arm_deadline(attempt, run_signal, settle=False)
    writes: set[asyncio.Future[None]] = set()

    def progress(done: float, total: float | None, note: str | None) -> None:
        if attempt.note_progress(done, total, note):  # the write itself goes off the loop
            write = asyncio.ensure_future(lane.offload(attempt.flush_progress))
            writes.add(write)
            write.add_done_callback(written)

    def written(write: asyncio.Future[None]) -> None:
        writes.discard(write)
        error = None if write.cancelled() else write.exception()
        if error is not None:  # a sync body would have seen it raise; here the run goes on without it
            log_event(logging.WARNING, "jobs.progress.failed", error=repr(error), **attempt.log_fields())

    job_run = job_run_for(
        attempt, run_signal, lambda: AsyncStep(offload=lane.offload, **step_options(attempt, run_signal)), progress
    )
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    state = _BodyState()

    def abort_here(reason: UltimateError) -> None:  # on the loop: stop the body at its next await
        if state.ended:
            return
        state.aborted = True
        if reason.code == "X_JOB_TIMEOUT":  # the deadline's verdict lands now, not when the body unwinds
            state.settling = loop.create_task(lane.offload(attempt.settle, attempt.fail, reason))
        task.cancel()

    def on_abort(reason: UltimateError) -> None:  # from any thread: a deadline's timer, the worker's drain
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(abort_here, reason)

    run_signal.listen(on_abort)
    error: BaseException | None = None
    result: Any = None
    scope, current = enter_scope(job_run.actor), enter_signal(run_signal)  # the body runs in this task
    try:
        result = await attempt.handle.fn(job_run)
    except asyncio.CancelledError as cancelled:
        if state.aborted:
            if task.uncancel() > 0:
                raise  # the lane is stopping as well — the lease lapses, as an abandoned thread's
            error = cancelled
        elif task.cancelling():
            raise  # not the run's own abort: the lane is stopping — the lease lapses, as an abandoned thread's
        else:  # the body's own (an inner task or future it awaited was cancelled): a failure like any other
            error = body_exited(attempt, cancelled)
    except (Exception, StepSuspension) as exc:  # settled below: by the retry policy, or suspended
        error = exc
    except BaseException as raised:  # sys.exit() and its kind: caught here, before the loop would see it
        interrupted = user_interrupt(attempt, raised)
        if interrupted is not None:
            await lane.offload(attempt.settle, attempt.interrupt, interrupted)
            raise
        error = body_exited(attempt, raised)
    finally:
        state.ended = True
        run_signal.unlisten(on_abort)  # the flight's signal outlives the attempt: leave it no path back to it
        leave_signal(current)
        leave_scope(scope)
        if timer is not None:
            timer.cancel()
        if writes:
            await asyncio.wait(writes)
        if state.settling is not None:
            await asyncio.wait({state.settling})
    if isinstance(error, StepSuspension):
        await lane.offload(after_abort_or, attempt, run_signal, attempt.suspend, error)
    elif error is not None:
        await lane.offload(after_abort_or, attempt, run_signal, attempt.fail, error)
    elif _settles_in_memory(attempt, run_signal):
        # returned in time (no deadline had fired, and for an async attempt none settles from its timer):
        # an Ack handed to the runner, on the loop — no hop
        attempt.settle(attempt.complete, result)
    else:
        await lane.offload(returned, attempt, run_signal, result)


class _BodyState:
    """What an async attempt's abort callback and its body's ``await`` share, on the loop."""

    __slots__ = ("aborted", "ended", "settling")

    def __init__(self) -> None:
        self.aborted = False  # the run's signal cancelled the body (not the lane's stop)
        self.ended = False  # the body's await came back: an abort after it cancels nothing
        self.settling: asyncio.Task[Any] | None = None  # a deadline's settle, made without waiting for the body
