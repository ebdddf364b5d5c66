"""One attempt's state, shared by the body's thread and the deadline timer, and every way it settles
its row: complete (now, or left to the runner — the worker's settle buffer — as
:attr:`JobExecution.completion`), suspend, interrupt, hand back, refuse, fail (retry, dead-letter or
drop by the policy and the error's class) — then ``tell`` the job's ``on_settled``. Only the first
settle lands; the others are no-ops."""

from __future__ import annotations

import logging
import os
import random
import threading
import traceback
from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any

from ..contracts.jobs import PROGRESS_INTERVAL_MS, Ack, ClaimedJob, NackOptions, Progress
from ..errors import UltimateError, code_of, retry_after_seconds_of, retry_class
from ..guards.admission import check_progress
from ..guards.redaction import scrub, secret_values
from .definition import JobHandle
from .installed import job_clock
from .logs import log_event
from .outcomes import ENDINGS, AttemptEnv, ExecutionHooks, JobExecution, Settled, StopReason
from .retry import backoff_ms, is_final_attempt, retry_after_delay_ms
from .settled import arun_on_settled, run_on_settled
from .steps import StepSuspension


class Attempt:
    """The state of one attempt, shared by the body's thread and the deadline timer."""

    def __init__(
        self,
        claimed: ClaimedJob,
        handle: JobHandle[Any, Any],
        env: AttemptEnv,
        hooks: ExecutionHooks | None = None,
    ) -> None:
        self.claimed = claimed
        self.handle = handle
        self.env = env
        self.driver = env.driver
        self.clock = env.clock or job_clock()
        self.context = env.context() if env.context is not None else None
        self.rng: random.Random | None = env.rng
        self.hooks = hooks
        self.lease_key: str | None = None  # the fleet slot this run asked for (held or busy)
        self.started = self.clock.now_ms()
        self.final = is_final_attempt(handle.retry, claimed.attempt)
        self.execution = JobExecution(
            job_id=claimed.id, name=claimed.name, queue=claimed.queue, attempt=claimed.attempt, final_attempt=self.final
        )
        self.parsed: Any = None
        self.tenant_id: str | None = None
        self.timed_out_at: int | None = None
        """When the job's timeout fired: the instant its failure is settled at, however late the settle runs."""
        self._settle_lock = threading.Lock()
        self._settled = False  # a settle began (the first wins)
        self._settle_finished = False  # ... and came back
        self._settle_waiter: threading.Event | None = None  # made only for an ending() that waits on one
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

    def log_fields(self) -> dict[str, Any]:
        return claim_fields(self.claimed)

    # -- progress ------------------------------------------------------------------------------

    def progress(self, done: float, total: float | None, note: str | None) -> None:
        if self.note_progress(done, total, note):
            self.flush_progress()

    def note_progress(self, done: float, total: float | None, note: str | None) -> bool:
        """Keep the latest progress; answers whether a write is due (at most one a second)."""
        now = self.clock.now_ms()
        check_progress(done, total, note)  # refused at the call, where the body can see why
        if note is not None:
            note = self.scrub(note)  # stored and shown on every operator surface: never a secret in clear
        self._progress_pending = Progress(done=done, total=total, note=note, at_ms=now)
        return now - self._progress_last >= PROGRESS_INTERVAL_MS

    @property
    def progress_pending(self) -> bool:
        """Whether progress is kept that the next settle writes first (a driver call)."""
        return self._progress_pending is not None

    def flush_progress(self) -> None:
        """Write the progress kept since the last write, if any."""
        pending, self._progress_pending = self._progress_pending, None
        if pending is None:
            return
        self._progress_last = pending.at_ms
        self.driver.record_progress(self.claimed.id, self.claimed.ref, pending)

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
            self.flush_progress()
            fn(*args)
        finally:
            with self._settle_lock:
                self._settle_finished = True
                waiter = self._settle_waiter
            if waiter is not None:
                waiter.set()
        return True

    @property
    def settled(self) -> bool:
        return self._settled

    @property
    def waited_ms(self) -> int:
        """How long the row waited from its run time to this attempt's start: what its queue's wait histogram
        counts when the attempt settles (a clock step backwards counts as no wait)."""
        return max(0, self.started - self.claimed.run_at_ms)

    def complete(self, result: Any) -> None:
        ex = self.execution
        ex.duration_ms = self.clock.now_ms() - self.started
        ex.outcome, ex.result = "completed", result
        if self.env.leave_completions and self.handle.on_settled is None:
            # nobody waits on this settle inside the attempt: the runner settles it, in a batch
            ex.completion = Ack(self.claimed.id, self.claimed.ref, ex.duration_ms, self.waited_ms)
            return
        acker = self.env.acker or self.driver
        landed = acker.ack(self.claimed.id, self.claimed.ref, duration_ms=ex.duration_ms, wait_ms=self.waited_ms)
        completion_settled(self.claimed, ex, landed, None)

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
            **self.log_fields(),
        )

    def interrupt(self, reason: UltimateError) -> None:
        ex = self.execution
        ex.duration_ms = self.clock.now_ms() - self.started
        now = self.clock.now_ms()
        options = NackOptions(error=describe_error(reason), code=reason.code, count_attempt=False, run_at_ms=now)
        ex.landed = self.driver.nack(self.claimed.id, self.claimed.ref, options)
        ex.outcome, ex.error, ex.code, ex.resume_at_ms = "interrupted", reason, reason.code, now
        log_event(logging.WARNING, "jobs.job.interrupted", reason=reason.code, **self.log_fields())

    def hand_back(self, run_at_ms: int) -> None:
        """Give the claim back unrun and uncounted (a busy key under ``when_busy="wait"``)."""
        options = NackOptions(count_attempt=False, run_at_ms=run_at_ms)
        self.execution.landed = self.driver.nack(self.claimed.id, self.claimed.ref, options)
        self.execution.resume_at_ms = run_at_ms

    def refuse(self, error: UltimateError) -> None:
        ex = self.execution
        options = NackOptions(error=self.scrub(describe_error(error)), code=error.code, fail=True, count_attempt=False)
        ex.landed = self.driver.nack(self.claimed.id, self.claimed.ref, options)
        ex.outcome, ex.error, ex.code = "refused", error, error.code
        log_event(logging.WARNING, "jobs.job.refused", code=error.code, **self.log_fields())

    def fail(self, error: BaseException) -> None:
        ex = self.execution
        now = self.timed_out_at if self.timed_out_at is not None else self.clock.now_ms()
        ex.duration_ms = now - self.started
        policy = self.handle.retry
        classified = retry_class(error)
        stop: StopReason | None = None
        if classified == "terminal":
            stop = "terminal"
        elif self.final:
            stop = "attempts-exhausted"
        text = self.scrub(describe_error(error))
        code = code_of(error)
        if stop is None:
            seconds = retry_after_seconds_of(error) if classified == "retry-after" else None
            if seconds is not None:
                delay = retry_after_delay_ms(policy, seconds, self.rng)
            else:
                delay = backoff_ms(policy, self.claimed.attempt, self.rng)
            run_at = now + delay
            options = NackOptions(
                error=text, code=code, run_at_ms=run_at, duration_ms=ex.duration_ms, wait_ms=self.waited_ms
            )
            ex.outcome, ex.resume_at_ms = "retried", run_at
        else:
            verdict = (
                f"[{stop}] stopped on attempt {self.claimed.attempt} of {policy.attempts}"
                + (" — a terminal code spends no further attempts" if stop == "terminal" else "")
                + (" (X_JOB_MAX_ATTEMPTS)" if stop == "attempts-exhausted" else "")
            )
            text = f"{text}\n{verdict}"
            if policy.dead_letter:
                options = NackOptions(
                    error=text, code=code, dead_letter=True, duration_ms=ex.duration_ms, wait_ms=self.waited_ms
                )
                ex.outcome = "dead-lettered"
            else:
                options = NackOptions(
                    error=text, code=code, fail=True, duration_ms=ex.duration_ms, wait_ms=self.waited_ms
                )
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
            duration_ms=ex.duration_ms,
            retry_in_ms=None if ex.resume_at_ms is None or stop is not None else ex.resume_at_ms - now,
            traceback=self.scrub(body_traceback(error)),
            **self.log_fields(),
        )

    # -- on_settled ----------------------------------------------------------------------------

    def tell(self) -> None:
        """Tell ``on_settled`` how the attempt ended, when it ended for good and the settle landed."""
        settled = self.ending()
        if settled is not None:
            error = run_on_settled(self.handle, settled, self.tenant_id, scrub_text=self.scrub)
            self.execution.on_settled_error = error

    async def atell(self, offload: Callable[..., Awaitable[Any]]) -> None:
        """:meth:`tell` from an async attempt (an ``async def`` hook awaited on its loop)."""
        settled = await offload(self.ending)
        if settled is not None:
            self.execution.on_settled_error = await arun_on_settled(
                self.handle, settled, self.tenant_id, offload=offload, scrub_text=self.scrub
            )

    def ending(self) -> Settled | None:
        """What ``on_settled`` is told, or ``None`` when the attempt did not end the run or its settle did
        not land. Waits for a settle still on the wire in the deadline timer's thread."""
        with self._settle_lock:
            waiter = None
            if self._settled and not self._settle_finished:
                waiter = self._settle_waiter = self._settle_waiter or threading.Event()
        if waiter is not None:
            waiter.wait()
        ex = self.execution
        if ex.outcome not in ENDINGS or not ex.landed:
            return None
        return Settled(
            outcome=ex.outcome,
            job_id=self.claimed.id,
            run_id=self.claimed.run_id,
            name=self.claimed.name,
            attempt=self.claimed.attempt,
            input=self.parsed,
            result=ex.result,
            error=None if ex.error is None else self.scrub(describe_error(ex.error)),
            code=ex.code,
            ctx=self.context,
            tenant_id=self.tenant_id,
        )


def claim_fields(claimed: ClaimedJob) -> dict[str, Any]:
    """The log fields that name an attempt."""
    return {
        "job_id": claimed.id,
        "name": claimed.name,
        "queue": claimed.queue,
        "attempt": claimed.attempt,
        "max_attempts": claimed.max_attempts,
        "run_id": claimed.run_id,
    }


def completion_settled(claimed: ClaimedJob, execution: JobExecution, landed: bool, error: BaseException | None) -> None:
    """Record on ``execution`` how its completion's settle came back, and log it: ``jobs.job.completed``,
    or — the settle raised — ``jobs.settle.failed`` with the outcome cleared (nothing counts it: the
    lease lapses, the queue delivers the row again, and the attempt that lands is the one counted)."""
    execution.landed = landed
    if error is not None:
        execution.outcome, execution.result, execution.error = None, None, error
        log_event(logging.ERROR, "jobs.settle.failed", error=repr(error), **claim_fields(claimed))
        return
    log_event(
        logging.INFO, "jobs.job.completed", duration_ms=execution.duration_ms, landed=landed, **claim_fields(claimed)
    )


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def body_traceback(error: BaseException) -> str:
    """``error``'s traceback from the first frame outside this package (the body's own code) down."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb)).rstrip()


def describe_error(error: BaseException) -> str:
    """An error as it is stored and told: ``CODE: message`` (or its type and text), then its traceback."""
    code = code_of(error)
    head = f"{code}: {getattr(error, 'message', str(error))}" if code else f"{type(error).__name__}: {error}"
    tb = "".join(traceback.format_exception(error)).rstrip()
    return f"{head}\n{tb}"
