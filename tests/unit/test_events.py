"""The event wait's clock discipline on the memory bus: the bus clock is read BEFORE the bus is asked,
so an answer landing as the deadline passes still counts; and the bus as a purge target."""

from __future__ import annotations

from typing import Any

from tests.conftest import JobsEnv
from ultimate_jobs import JobRun, events_purge_target, job, set_event_bus
from ultimate_jobs.events import MemoryEventBus
from ultimate_jobs.features.purge import EVENTS_PURGE_TARGET
from ultimate_jobs.testing import run_jobs


class LateAnswer(MemoryEventBus):
    """A bus whose first clock read at or past ``answer_at`` is the moment an answer is published — the
    race between "the deadline passed" and "the answer arrived" the wait must settle in the answer's
    favour (``answer_at=None``: no answer ever)."""

    def __init__(self, jobs: JobsEnv, answer_at: int | None) -> None:
        super().__init__(jobs.clock)
        self.answer_at, self.log = answer_at, []  # type: ignore[var-annotated]
        self.quiet = False

    def now(self) -> int:
        if self.quiet:  # the bus reading its own clock inside publish/find: not a read of the wait's
            return super().now()
        self.log.append("now")
        value = super().now()
        if self.answer_at is not None and value >= self.answer_at:
            self.answer_at = None
            self.quiet = True
            self.publish("order.paid", {"order_id": "o-1"})
            self.quiet = False
        return value

    def find(self, event: str, match: Any, *, since_ms: int) -> Any:
        self.log.append("find")
        self.quiet = True
        try:
            return super().find(event, match, since_ms=since_ms)
        finally:
            self.quiet = False


def waiter(timeout: str) -> Any:
    @job(idempotency_key=lambda i: "k", tenant="none", event_poll="30s", retry={"attempts": 1})
    def await_payment(run: JobRun[Any]) -> Any:
        return run.step.wait_for_event("paid", "order.paid", match={"order_id": "o-1"}, timeout=timeout, required=True)

    return await_payment


def test_an_answer_that_lands_as_the_deadline_passes_is_matched_not_timed_out(jobs: JobsEnv) -> None:
    bus = LateAnswer(jobs, answer_at=jobs.clock.now_ms() + 30_000)  # as the 30 s deadline passes
    set_event_bus(bus)
    queued = waiter("30s").enqueue({})
    report = run_jobs(clock=jobs.clock)
    execution = report.last(queued.id)
    assert execution is not None and execution.outcome == "completed", execution
    assert execution.result == {"order_id": "o-1"}
    assert bus.log == ["now", "find", "now", "find"]  # each poll: the clock, then the ask


def test_with_no_answer_the_wait_times_out_after_one_last_ask(jobs: JobsEnv) -> None:
    bus = LateAnswer(jobs, answer_at=None)
    set_event_bus(bus)
    queued = waiter("30s").enqueue({})
    execution = run_jobs(clock=jobs.clock).last(queued.id)
    assert execution is not None and execution.code == "X_JOB_TIMEOUT"
    assert bus.log == ["now", "find", "now", "find"]  # the last poll: the clock, then one more ask


def test_the_memory_bus_as_a_purge_target(jobs: JobsEnv) -> None:
    bus = MemoryEventBus(jobs.clock)
    bus.publish("a", {}, ttl="1m")
    bus.publish("b", {}, ttl="1h")
    jobs.clock.advance(60_000)
    target = events_purge_target(bus)
    assert (target.name, EVENTS_PURGE_TARGET) == ("x_job_events", "x_job_events")
    assert target.purge_expired(jobs.clock.now_ms()) == 1
    assert target.purge_expired() == 0
