"""The memory driver: the whole conformance suite, plus what only the memory driver has (its wake)."""

from __future__ import annotations

import pytest

from ultimate_jobs.drivers.base import DEFAULT_VISIBILITY_TIMEOUT_MS, NackOptions, WorkerInfo
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance import (
    QUEUE,
    DriverConformance,
    DriverFactory,
    claim_one,
    enqueue_finished,
    request,
)


class TestMemoryDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self) -> DriverFactory:
        return lambda clock: MemoryDriver(clock=clock)


@pytest.fixture
def memory() -> MemoryDriver:
    return MemoryDriver(clock=FrozenClock())


@pytest.fixture
def heard(memory: MemoryDriver) -> list[str]:
    queues: list[str] = []
    memory.subscribe(queues.append)
    return queues


def test_wake_hears_a_due_enqueue_once_per_queue(memory: MemoryDriver, heard: list[str]) -> None:
    memory.enqueue_many([request(queue="b"), request(queue="a"), request(queue="a")])
    assert heard == ["a", "b"]


def test_wake_is_silent_for_a_delayed_or_deduped_enqueue(memory: MemoryDriver, heard: list[str]) -> None:
    memory.enqueue(request(key="k"))
    heard.clear()
    memory.enqueue(request(key="k"))
    memory.enqueue(request(run_at_ms=memory.clock.now_ms() + 1_000))
    assert heard == []


def test_wake_hears_requeue_promote_resume_and_a_due_retry(memory: MemoryDriver, heard: list[str]) -> None:
    done = enqueue_finished(memory, request())
    delayed = memory.enqueue(request(queue="later", run_at_ms=memory.clock.now_ms() + 1_000)).id
    heard.clear()
    memory.introspect.requeue(done)
    memory.introspect.promote(delayed)
    memory.introspect.pause_queue("paused")
    memory.introspect.resume_queue("paused")
    job = claim_one(memory)
    memory.nack(job.id, job.ref, NackOptions(error="e"))
    assert heard == [QUEUE, "later", "paused", QUEUE]


def test_wake_is_silent_for_a_backing_off_retry(memory: MemoryDriver, heard: list[str]) -> None:
    memory.enqueue(request())
    job = claim_one(memory)
    heard.clear()
    memory.nack(job.id, job.ref, NackOptions(error="e", run_at_ms=memory.clock.now_ms() + 1_000))
    assert heard == []


def test_unsubscribe_and_close_stop_the_wake(memory: MemoryDriver) -> None:
    first: list[str] = []
    second: list[str] = []
    unsubscribe = memory.subscribe(first.append)
    memory.subscribe(second.append)
    unsubscribe()
    unsubscribe()
    memory.enqueue(request(queue="a"))
    memory.close()
    memory.enqueue(request(queue="b"))
    assert (first, second) == ([], ["a"])


def test_default_window_is_the_protocol_default() -> None:
    assert MemoryDriver().visibility_timeout_ms == DEFAULT_VISIBILITY_TIMEOUT_MS


def test_workers_expire_on_the_drivers_own_window() -> None:
    clock = FrozenClock()
    driver = MemoryDriver(clock=clock, visibility_timeout_ms=5_000)
    info = WorkerInfo("w1", "host", 1, clock.now_ms(), (QUEUE,), 4, (), clock.now_ms())
    driver.introspect.record_worker(info)
    clock.advance(4_999)
    assert driver.introspect.workers() == [info]
    clock.advance(1)
    assert driver.introspect.workers() == []
