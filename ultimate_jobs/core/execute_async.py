"""One attempt of an ``async def`` body → one :class:`JobExecution`, on an event loop.

The same attempt as :func:`~ultimate_jobs.core.execute.execute_job` — the same outcomes, the same settle
rules, the same pieces (``prepare``, ``arm_deadline``, ``after_abort_or``, ``returned``) — with the body
awaited as a task of its own on the lane's loop, and every sync call (the driver's settles, the fleet
slot, the app's context factory, a plain ``on_settled``) made through ``lane.offload``, never on the loop.

When the run's signal aborts — the job's timeout, an operator cancel, a lost lease, the worker's drain —
the body's task is cancelled (``CancelledError`` at its next ``await``) and the attempt is settled by the
signal's verdict, exactly as a sync body's is. A timeout settles at once, before the body has unwound.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..drivers.records import ClaimedJob
from ..errors import UltimateError
from ..runtime.async_lane import AsyncLane
from .attempt import Attempt
from .definition import JobHandle
from .execute import (
    _hand_back_unknown,
    after_abort_or,
    arm_deadline,
    find_handle,
    job_run_for,
    prepare,
    release_slot,
    returned,
    step_options,
)
from .installed import job_clock
from .logs import log_event
from .outcomes import AttemptEnv, ExecutionHooks, JobExecution
from .scope import acting_as
from .signals import CancelSignal, cancel_on_abort, signal_scope
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
        return await lane.offload(_hand_back_unknown, claimed, env.driver, env.clock or job_clock())
    attempt = await lane.offload(Attempt, claimed, found, env, hooks)  # the app's context factory may read the DB
    run_signal = signal.child() if signal is not None else CancelSignal()
    with job_span(claimed, attempt.execution):  # the child of the enqueue's span (a no-op without OTel)
        try:
            await _run(attempt, run_signal, env.visibility_timeout_ms, lane)
        finally:
            await lane.offload(release_slot, attempt)
        await attempt.atell(lane.offload)
    return attempt.execution


async def _run(attempt: Attempt, run_signal: CancelSignal, visibility_timeout_ms: int, lane: AsyncLane) -> None:
    if not await lane.offload(prepare, attempt, run_signal, visibility_timeout_ms):
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

    step = AsyncStep(offload=lane.offload, **step_options(attempt, run_signal))
    job_run = job_run_for(attempt, run_signal, step, progress)

    async def settle_a_timeout(reason: UltimateError) -> None:
        if reason.code == "X_JOB_TIMEOUT":  # the deadline's verdict lands now, not when the body unwinds
            await lane.offload(attempt.settle, attempt.fail, reason)

    with acting_as(job_run.actor), signal_scope(run_signal):
        body = asyncio.ensure_future(attempt.handle.fn(job_run))  # the task copies the run's scope and signal
    try:
        await cancel_on_abort(run_signal, body, on_abort=settle_a_timeout)
    finally:
        if timer is not None:
            timer.cancel()
        if writes:
            await asyncio.wait(writes)
    error = asyncio.CancelledError() if body.cancelled() else body.exception()
    if isinstance(error, StepSuspension):
        await lane.offload(after_abort_or, attempt, run_signal, attempt.suspend, error)
    elif error is not None:
        await lane.offload(after_abort_or, attempt, run_signal, attempt.fail, error)
    else:
        await lane.offload(returned, attempt, run_signal, body.result())
