"""One attempt of one claimed job → one :class:`JobExecution`.

How an attempt ends, and what each ending counts:

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

from typing import Any

from ..contracts.jobs import ClaimedJob
from ..runtime.async_lane import AsyncLane
from .attempt import Attempt
from .definition import JobHandle
from .execute_async import execute_job_async
from .installed import job_clock
from .outcomes import Acker, AttemptEnv, ExecutionHooks, JobExecution, Settled, job_lease_key
from .phases import (
    after_abort_or,
    arm_deadline,
    body_exited,
    find_handle,
    hand_back_unknown,
    is_async_job,
    job_run_for,
    prepare,
    release_slot,
    returned,
    step_options,
    user_interrupt,
)
from .scope import acting_as
from .settled import announce_exhausted, drop_exhausted_names
from .signals import CancelSignal, signal_scope
from .steps import Step, StepSuspension
from .tracing import job_span

__all__ = [
    "Acker",
    "AttemptEnv",
    "ExecutionHooks",
    "JobExecution",
    "Settled",
    "announce_exhausted",
    "drop_exhausted_names",
    "execute_job",
    "execute_job_async",
    "find_handle",
    "is_async_job",
    "job_lease_key",
]


def execute_job(
    claimed: ClaimedJob,
    env: AttemptEnv,
    *,
    signal: CancelSignal | None = None,
    hooks: ExecutionHooks | None = None,
    handle: JobHandle[Any, Any] | None = None,
) -> JobExecution:
    """Run one attempt of ``claimed`` in ``env`` and settle it through ``env.driver``: one
    :class:`JobExecution`.

    ``signal`` is the runner's abort line into the run (drain, cancel, lease loss); the job's own
    ``timeout`` is armed here on the env's clock: it aborts the run's signal and fails the attempt at
    once, and a body that returns after that is logged ``jobs.timeout.abandoned``. ``hooks`` tell the
    worker when the run takes a fleet slot (so its heartbeat renews it) and when the settle begins (so a
    renewal already on the wire that comes back unowned is not reported as a lost lease). ``handle`` is
    the job's declaration when the caller holds it (else it is looked up by the row's name).

    Under ``env.leave_completions`` a completion nobody inside the attempt waits on comes back unsettled,
    its ack in ``execution.completion``: the runner settles it (the worker, in batches) and records the
    answer with :func:`ultimate_jobs.core.attempt.completion_settled`.

    An ``async def`` body given here runs on an :class:`~ultimate_jobs.runtime.async_lane.AsyncLane` of
    its own for this one attempt (a runner with many async jobs keeps one lane and calls
    :func:`execute_job_async`).

    >>> execution = execute_job(claimed, AttemptEnv(driver=driver, clock=clock))
    >>> execution.outcome, execution.landed
    ('completed', True)
    """
    found = find_handle(claimed, handle)
    if found is None:
        return hand_back_unknown(claimed, env.driver, env.clock or job_clock())
    if found.is_async:
        return _execute_on_a_lane_of_its_own(claimed, env, signal=signal, hooks=hooks, handle=found)
    attempt = Attempt(claimed, found, env, hooks)
    run_signal = signal.child() if signal is not None else CancelSignal()
    with job_span(claimed, attempt.execution):  # the child of the enqueue's span (a no-op without OTel)
        try:
            _run(attempt, run_signal, env.visibility_timeout_ms)
        finally:
            release_slot(attempt)
        attempt.tell()
    return attempt.execution


def _execute_on_a_lane_of_its_own(
    claimed: ClaimedJob,
    env: AttemptEnv,
    *,
    signal: CancelSignal | None,
    hooks: ExecutionHooks | None,
    handle: JobHandle[Any, Any],
) -> JobExecution:
    lane = AsyncLane(name=f"attempt-{claimed.id}", offload_threads=1)
    try:
        return lane.run_here(
            lambda: execute_job_async(claimed, env, lane=lane, signal=signal, hooks=hooks, handle=handle)
        )
    finally:
        lane.stop(wait=False)


def _run(attempt: Attempt, run_signal: CancelSignal, visibility_timeout_ms: int) -> None:
    if not prepare(attempt, run_signal, visibility_timeout_ms):
        return
    timer = arm_deadline(attempt, run_signal, settle=True)
    job_run = job_run_for(attempt, run_signal, lambda: Step(**step_options(attempt, run_signal)), attempt.progress)
    try:
        with acting_as(job_run.actor), signal_scope(run_signal):
            result = attempt.handle.fn(job_run)
    except StepSuspension as suspension:
        after_abort_or(attempt, run_signal, attempt.suspend, suspension)
        return
    except Exception as exc:
        after_abort_or(attempt, run_signal, attempt.fail, exc)
        return
    except BaseException as raised:  # sys.exit() and its kind: a failure like any other, and the slot lives on
        interrupted = user_interrupt(attempt, raised)
        if interrupted is not None:
            attempt.settle(attempt.interrupt, interrupted)
            raise
        after_abort_or(attempt, run_signal, attempt.fail, body_exited(attempt, raised))
        return
    finally:
        if timer is not None:
            timer.cancel()
    returned(attempt, run_signal, result)
