"""The async half of the conformance suite: ``async def`` job bodies on the driver under test.

A mixin of :class:`~ultimate_jobs.testing.conformance.DriverConformance`. Each scenario declares a job
whose body is ``async def``, installs the suite's driver and frozen clock process-wide (the
``async_jobs`` fixture, with a memory event bus), and runs it through :func:`~ultimate_jobs.testing.run_jobs`
— or, where a scenario aborts the run from outside (cancel, drain, lost lease), through
:func:`~ultimate_jobs.core.execute.execute_job_async` on an :class:`~ultimate_jobs.runtime.async_lane.AsyncLane`
— so steps, retries, timeouts, cancels and ``on_settled`` are held to the same rules on every driver as
the sync bodies are.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..contracts.protocol import JobDriver
from ..core.declare import job
from ..core.definition import JobHandle
from ..core.execute import AttemptEnv, JobExecution
from ..core.execute_async import execute_job_async
from ..core.outcomes import Settled
from ..core.run import JobRun
from ..core.signals import CancelSignal, current_signal
from ..drivers.memory.events import MemoryEventBus
from ..errors import JobAbortedError, JobDrainedError, LeaseLostError, UltimateError
from ..events import publish_event
from ..runtime.async_lane import AsyncLane
from .clock import FrozenClock
from .conformance_support import QUEUE, claim_one, declared
from .django import installed_jobs
from .runner import RunReport, run_jobs

_names = itertools.count(1)
NO_JITTER = {"attempts": 3, "delay": 1000, "jitter": False}


def async_job(body: Callable[[JobRun[Any]], Any], **options: Any) -> JobHandle[Any, Any]:
    """Declare ``body`` (an ``async def``) on the suite's queue, under a name no other scenario uses."""
    options.setdefault("name", f"conformance.async.{next(_names)}")
    options.setdefault("queue", QUEUE)
    options.setdefault("idempotency_key", lambda i: "k")
    options.setdefault("tenant", "none")
    options.setdefault("retry", NO_JITTER)
    return job(**options)(body)


def drain(driver: JobDriver, clock: FrozenClock) -> RunReport:
    """``run_jobs`` over the suite's queue."""
    return run_jobs(driver, clock=clock, queues=[QUEUE])


class Told:
    """An ``async def`` ``on_settled`` that records what it was told."""

    def __init__(self) -> None:
        self.settled: list[Settled] = []

    async def __call__(self, settled: Settled) -> None:
        await asyncio.sleep(0)
        self.settled.append(settled)

    @property
    def outcomes(self) -> list[str]:
        return [s.outcome for s in self.settled]


class AsyncJobContract:
    """``async def`` bodies, end to end on the driver: the same outcomes, steps and hooks as sync ones."""

    @pytest.fixture
    def async_jobs(self, driver: JobDriver, clock: FrozenClock) -> Iterator[MemoryEventBus]:
        """The suite's driver and clock installed process-wide, a memory event bus, and the jobs the
        scenario declares forgotten afterwards."""
        with installed_jobs(clock, driver) as bus:
            yield bus

    @pytest.fixture
    def timed(self, driver: JobDriver) -> None:
        """For a scenario whose run waits for a later instant (a retry's delay, a sleep, a timeout):
        ``run_jobs`` moves the frozen clock to the next due row, which it finds through the operator store,
        so the scenario is skipped, saying so, on a driver that declares none."""
        declared(driver, driver.operator, "operator", "run_jobs finds the next due instant through it")

    def test_async_body_completes_with_its_result_and_on_settled_is_awaited(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus
    ) -> None:
        told = Told()

        async def body(run: JobRun[Any]) -> dict[str, Any]:
            await asyncio.sleep(0)
            return {"n": run.input["n"] * 2, "signal": current_signal() is run.signal}

        queued = async_job(body, on_settled=told).enqueue({"n": 21})
        report = drain(driver, clock)
        assert [(e.outcome, e.result) for e in report.executions] == [("completed", {"n": 42, "signal": True})]
        assert told.outcomes == ["completed"] and told.settled[0].result == {"n": 42, "signal": True}
        assert told.settled[0].job_id == queued.id

    def test_async_steps_run_once_and_replay_on_the_next_attempt(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus, timed: None
    ) -> None:
        calls: list[str] = []

        async def fetch() -> dict[str, int]:
            calls.append("fetch")
            await asyncio.sleep(0)
            return {"rows": 2}

        def count() -> int:
            calls.append("count")
            return 7

        async def body(run: JobRun[Any]) -> list[Any]:
            fetched = await run.step.run("fetch", fetch)
            counted = await run.step.run("count", count)
            if run.attempt == 1:
                raise ConnectionError("the gateway hung up")
            return [fetched, counted]

        async_job(body).enqueue({})
        report = drain(driver, clock)
        assert [e.outcome for e in report.executions] == ["retried", "completed"]
        assert report.executions[-1].result == [{"rows": 2}, 7]
        assert calls == ["fetch", "count"]  # the second attempt read both back

    def test_async_duplicate_step_name_is_refused_terminally(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus
    ) -> None:
        async def body(run: JobRun[Any]) -> None:
            await run.step.run("same", lambda: 1)
            await run.step.run("same", lambda: 2)

        async_job(body).enqueue({})
        report = drain(driver, clock)
        assert [(e.outcome, e.code) for e in report.executions] == [("dead-lettered", "X_STEP_DUPLICATE")]

    def test_async_sleep_suspends_uncounted_and_resumes_after_it(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus, timed: None
    ) -> None:
        resumed: list[int] = []

        async def body(run: JobRun[Any]) -> str:
            await run.step.run("before", lambda: "x")
            await run.step.sleep("cool-off", "1h")
            resumed.append(clock.now_ms())
            return "woke"

        start = clock.now_ms()
        async_job(body, retry={"attempts": 1}).enqueue({})
        report = drain(driver, clock)
        assert [e.outcome for e in report.executions] == ["suspended", "completed"]
        assert report.executions[0].resume_at_ms == start + 3_600_000
        assert resumed == [start + 3_600_000] and report.executions[-1].result == "woke"
        assert [e.attempt for e in report.executions] == [1, 1]  # a suspension spends no attempt

    def test_async_wait_for_event_answers_the_published_data_or_none(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus, timed: None
    ) -> None:
        async def body(run: JobRun[Any]) -> Any:
            return await run.step.wait_for_event("paid", "invoice.paid", timeout="1h", match={"id": run.input["id"]})

        handle = async_job(body, event_poll="10m", idempotency_key=lambda i: str(i["id"]))
        paid = handle.enqueue({"id": 1})
        never = handle.enqueue({"id": 2})
        first = drain_until_suspended(driver, clock)
        assert first.outcomes["suspended"] == 2
        publish_event("invoice.paid", {"id": 1, "amount": 5})
        report = drain(driver, clock)
        results = {e.job_id: e.result for e in report.executions if e.outcome == "completed"}
        assert results == {paid.id: {"id": 1, "amount": 5}, never.id: None}

    def test_async_retries_then_dead_letters_and_on_settled_hears_it(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus, timed: None
    ) -> None:
        told = Told()

        async def body(run: JobRun[Any]) -> None:
            await asyncio.sleep(0)
            raise ValueError(f"attempt {run.attempt} failed")

        async_job(body, on_settled=told, retry={"attempts": 2, "delay": 1000, "jitter": False}).enqueue({})
        report = drain(driver, clock)
        assert [e.outcome for e in report.executions] == ["retried", "dead-lettered"]
        assert report.executions[-1].stop_reason == "attempts-exhausted"
        assert told.outcomes == ["dead-lettered"] and "attempt 2 failed" in (told.settled[0].error or "")

    def test_async_timeout_cancels_the_body_and_retries_at_the_deadline(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus, timed: None
    ) -> None:
        unwound: list[str] = []

        async def body(run: JobRun[Any]) -> None:
            clock.advance(10_001)  # the work outlives the job's timeout
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                unwound.append(run.signal.reason.code if run.signal.reason else "?")
                raise

        start = clock.now_ms()
        async_job(body, timeout="10s", retry={"attempts": 2, "delay": 1000, "jitter": False}).enqueue({})
        report = drain(driver, clock)
        first = report.executions[0]
        assert (first.outcome, first.code, first.abandoned) == ("retried", "X_JOB_TIMEOUT", False)
        assert first.resume_at_ms == start + 10_000 + 1000  # settled at the deadline, then the backoff
        assert unwound == ["X_JOB_TIMEOUT", "X_JOB_TIMEOUT"]
        assert [e.outcome for e in report.executions] == ["retried", "dead-lettered"]

    def test_async_body_that_returns_after_its_timeout_is_abandoned(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus
    ) -> None:
        async def body(run: JobRun[Any]) -> str:
            clock.advance(10_001)
            return "finished anyway"

        async_job(body, timeout="10s", retry={"attempts": 1}).enqueue({})
        report = drain(driver, clock)
        assert [(e.outcome, e.code, e.abandoned, e.result) for e in report.executions] == [
            ("dead-lettered", "X_JOB_TIMEOUT", True, None)
        ]

    def test_async_step_timeout_cancels_the_step_function(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus
    ) -> None:
        async def stuck() -> None:
            clock.advance(5_001)
            await asyncio.sleep(3600)

        async def body(run: JobRun[Any]) -> str:
            try:
                await run.step.run("stuck", stuck)
            except UltimateError as exc:
                return exc.code
            return "no timeout"

        async_job(body, step_timeout="5s").enqueue({})
        report = drain(driver, clock)
        assert [(e.outcome, e.result) for e in report.executions] == [("completed", "X_JOB_TIMEOUT")]

    @pytest.mark.parametrize(
        ("reason", "outcome", "attempts_after"),
        [
            (JobAbortedError("an operator cancelled it"), "retried", 1),
            (LeaseLostError("another worker holds the claim"), "retried", 1),
            (JobDrainedError("the worker is draining"), "interrupted", 0),
        ],
        ids=["cancel", "lease-lost", "drain"],
    )
    def test_async_abort_cancels_the_body_and_settles_by_the_signals_verdict(
        self,
        driver: JobDriver,
        clock: FrozenClock,
        async_jobs: MemoryEventBus,
        reason: UltimateError,
        outcome: str,
        attempts_after: int,
    ) -> None:
        worker_signal = CancelSignal()
        told = Told()
        unwound: list[bool] = []

        async def body(run: JobRun[Any]) -> None:
            await run.step.run("first", lambda: 1)
            worker_signal.abort(reason)
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                unwound.append(True)
                raise ConnectionError("unwound by the cancel") from None  # the verdict is still the signal's

        queued = async_job(body, on_settled=told).enqueue({})
        execution = execute_async(driver, clock, signal=worker_signal)
        assert (execution.outcome, execution.code) == (outcome, reason.code)
        assert unwound == [True] and told.outcomes == []
        if driver.operator is not None:
            row = driver.operator.get(queued.id)
            assert row is not None and row.attempts == attempts_after

    def test_async_body_whose_signal_aborted_before_it_started_never_runs(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus
    ) -> None:
        calls: list[str] = []

        async def body(run: JobRun[Any]) -> None:
            calls.append("ran")

        async_job(body).enqueue({})
        worker_signal = CancelSignal()
        worker_signal.abort(JobDrainedError("draining"))
        execution = execute_async(driver, clock, signal=worker_signal)
        assert (execution.outcome, execution.code, calls) == ("interrupted", "X_DRAINING", [])

    def test_async_and_sync_bodies_drain_side_by_side(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus
    ) -> None:
        async def doubled(run: JobRun[Any]) -> int:
            return int(await run.step.run("double", lambda: run.input["n"] * 2))

        def tripled(run: JobRun[Any]) -> int:
            return int(run.step.run("triple", lambda: run.input["n"] * 3))

        a = async_job(doubled, idempotency_key=lambda i: str(i["n"]))
        s = async_job(tripled, idempotency_key=lambda i: str(i["n"]))
        ids = {a.enqueue({"n": n}).id: n * 2 for n in range(5)} | {s.enqueue({"n": n}).id: n * 3 for n in range(5)}
        report = drain(driver, clock)
        assert {e.job_id: e.result for e in report.executions} == ids


def drain_until_suspended(driver: JobDriver, clock: FrozenClock) -> RunReport:
    """One pass over what is due now, without moving the clock."""
    return run_jobs(driver, clock=clock, queues=[QUEUE], advance=False)


def execute_async(driver: JobDriver, clock: FrozenClock, *, signal: CancelSignal | None = None) -> JobExecution:
    """Claim the suite queue's one due row and run one attempt of it with :func:`execute_job_async` on a lane
    of its own (the caller's thread serving its driver calls, as under ``run_jobs``)."""
    claimed = claim_one(driver)
    env = AttemptEnv(driver=driver, clock=clock)
    lane = AsyncLane(name="conformance", offload_threads=1)
    try:
        return lane.run_here(lambda: execute_job_async(claimed, env, lane=lane, signal=signal))
    finally:
        lane.stop(wait=False)
