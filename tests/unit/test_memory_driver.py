"""The memory driver: the whole conformance suite, plus what only the memory driver has (its wake)."""

from __future__ import annotations

import random

import pytest

from ultimate_jobs.contracts.jobs import Ack, ClaimRef, Heartbeat, NackOptions
from ultimate_jobs.contracts.operator import WorkerInfo
from ultimate_jobs.contracts.protocol import JobDriver
from ultimate_jobs.defaults import DEFAULT_VISIBILITY_TIMEOUT_MS
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.memory.rows import MemoryRow
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance import (
    QUEUE,
    DriverConformance,
    DriverFactory,
    StateWriter,
    claim_one,
    enqueue_finished,
    request,
)


class TestMemoryDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self) -> DriverFactory:
        return lambda clock: MemoryDriver(clock=clock)

    @pytest.fixture
    def write_state(self) -> StateWriter:
        def write(driver: JobDriver, job_id: str, state: str) -> None:
            assert isinstance(driver, MemoryDriver)
            driver.rows[job_id].state = state  # type: ignore[assignment]

        return write


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
    memory.operator.requeue(done)
    memory.operator.promote(delayed)
    memory.operator.pause_queue("paused")
    memory.operator.resume_queue("paused")
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
    driver.record_worker(info)
    clock.advance(4_999)
    assert driver.operator.workers() == [info]
    clock.advance(1)
    assert driver.operator.workers() == []


def test_twenty_thousand_jobs_drain_once_each_in_claim_order(memory: MemoryDriver) -> None:
    # 20,000 rows: large enough that a claim sorting every row would take minutes, small enough for the unit suite
    now, n = memory.clock.now_ms(), 20_000
    memory.enqueue_many(
        [
            request(queue=("a", "b")[i % 2], priority=i % 3, run_at_ms=now - i * 7919 % 1000, id=f"job-{i:06d}")
            for i in range(n)
        ]
    )
    order: list[str] = []
    while batch := memory.claim(queues=["a", "b"], limit=8, worker_id="w1").jobs:
        order += [job.id for job in batch]
        assert memory.ack_many([Ack(job.id, job.ref) for job in batch]) == {job.id for job in batch}
    expected = sorted(range(n), key=lambda i: (-(i % 3), now - i * 7919 % 1000, i))
    assert order == [f"job-{i:06d}" for i in expected]
    assert memory.stats() == []  # every row done: nothing live, nothing dead (stats count no history)
    done = [row.queue for row in memory.rows.values() if row.state == "done"]
    assert (done.count("a"), done.count("b")) == (n // 2, n // 2)


def _oracle(
    driver: MemoryDriver, queues: list[str], limit: int, caps: dict[str, int] | None
) -> tuple[list[str], list[str]]:
    """What one claim takes and buries, by sorting every row: the memory driver's claim before its index."""
    now, wanted = driver.clock.now_ms(), set(queues) - set(driver.operator.paused_queues())

    def lapsed(r: MemoryRow) -> bool:
        return r.state == "running" and r.lease_until_ms is not None and r.lease_until_ms <= now

    rows = [
        r
        for r in driver.rows.values()
        if r.queue in wanted and ((r.state in ("ready", "delayed", "suspended") and r.run_at_ms <= now) or lapsed(r))
    ]
    rows.sort(key=lambda r: (-r.priority, r.run_at_ms, r.created_at_ms, r.seq))
    taken: list[str] = []
    buried = [r.id for r in rows if lapsed(r) and r.attempts >= r.max_attempts]
    for r in rows:
        per_queue = sum(driver.rows[t].queue == r.queue for t in taken)
        if r.id not in buried and len(taken) < limit and per_queue < (caps or {}).get(r.queue, limit):
            taken.append(r.id)
    return taken, buried


@pytest.mark.parametrize("seed", range(8))
def test_claims_match_a_sort_of_every_row_through_every_change(seed: int) -> None:
    """Random enqueues, settles, lease lapses, pauses and operator moves: each claim takes and buries
    exactly what sorting every row would."""
    rng, clock = random.Random(seed), FrozenClock()
    driver, refs, ids = MemoryDriver(clock=clock), dict[str, ClaimRef](), list[str]()
    for step in range(600):
        op, now = rng.randrange(9), clock.now_ms()
        if op == 0:
            batch = [
                request(
                    queue=rng.choice("abc"),
                    key=f"k{rng.randrange(40)}",
                    priority=rng.randrange(3),
                    max_attempts=rng.randint(1, 3),
                    run_at_ms=rng.choice([None, now - 20, now + 50, now + 400]),
                    id=f"j{step}-{i}",
                )
                for i in range(rng.randint(1, 6))
            ]
            ids += [e.id for e in driver.enqueue_many(batch)]
        elif op in (1, 2):
            queues, limit = rng.sample(["a", "b", "c"], rng.randint(1, 3)), rng.randint(0, 5)
            caps = rng.choice([None, {"a": 1}, {"b": 0, "c": 2}])
            expected = _oracle(driver, queues, limit, caps)
            claimed = driver.claim(
                queues=queues,
                limit=limit,
                worker_id="w1",
                visibility_timeout_ms=rng.choice([100, 300]),
                queue_limits=caps,
            )
            assert ([j.id for j in claimed.jobs], [e.id for e in claimed.buried]) == expected
            refs.update((j.id, j.ref) for j in claimed.jobs)
        elif op == 3 and refs:
            job_id = rng.choice(sorted(refs))
            choice = rng.randrange(3)
            if choice == 0:
                driver.ack(job_id, refs[job_id])
            elif choice == 1:
                retry_at = rng.choice([None, now + 80])
                driver.nack(job_id, refs[job_id], NackOptions(error="e", run_at_ms=retry_at))
            else:
                driver.heartbeat([Heartbeat(job_id, refs[job_id])], visibility_timeout_ms=rng.choice([50, 400]))
        elif op == 4:
            clock.advance(rng.choice([10, 60, 120, 350]))
        elif op == 5:
            queue = rng.choice("abc")
            pause = driver.operator.pause_queue if rng.random() < 0.5 else driver.operator.resume_queue
            pause(queue)
        elif ids:
            job_id, move = rng.choice(ids), rng.randrange(4)
            try:
                if move == 0:
                    driver.operator.cancel(job_id)
                elif move == 1:
                    driver.operator.requeue(job_id)
                elif move == 2:
                    driver.operator.promote(job_id)
                else:
                    driver.operator.remove(job_id)
            except UltimateError:
                pass  # not in a state that move applies to
