"""The worker running ``async def`` bodies on its event loop, beside sync bodies on its threads, on every
driver (memory, Postgres) and the frozen clock: async slots and claim sizing, leases, the job timeout,
operator cancel, the drain, limits, fleet concurrency keys, ``on_settled``, the settle buffer, and the
loop watchdog.

Async bodies that must stay running await a per-job gate (:class:`AsyncProbe`: a bounded poll with
``asyncio.sleep``, so a cancel lands at once); time moves only through ``jobs.clock.advance()``, which
fires the worker's heartbeat on the test thread — except in the watchdog test, which needs a loop that
is really blocked and a heartbeat that really runs on its own thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import AnyJobsEnv
from tests.helpers import eventually
from tests.postgres.test_worker import (
    HEARTBEAT_MS,
    QUEUE,
    WAIT,
    HeldAcks,
    closing_connections,
    code,
    declare,
    events,
    in_order,
    row,
)
from ultimate_jobs import Concurrency, JobRun
from ultimate_jobs.core.clock import SystemClock
from ultimate_jobs.core.execute import Settled
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.errors import InvariantError
from ultimate_jobs.guards.limits import LimitConfig
from ultimate_jobs.integration.console import worker_start_line
from ultimate_jobs.worker import JobWorker, job_worker
from ultimate_jobs.worker.build import async_queues


class AsyncProbe:
    """What the bodies report: each run that started (and on which thread), each one whose task was
    cancelled, and a gate per job the test opens."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.runs: dict[str, JobRun[Any]] = {}
        self.threads: dict[str, str] = {}
        self.cancelled: set[str] = set()
        self._gates: dict[str, threading.Event] = {}
        self._all_open = False

    def gate(self, job_id: str) -> threading.Event:
        with self._cond:
            event = self._gates.setdefault(job_id, threading.Event())
            if self._all_open:
                event.set()
            return event

    def enter(self, run: JobRun[Any]) -> None:
        with self._cond:
            self.runs[run.job_id] = run
            self.threads[run.job_id] = threading.current_thread().name
            self._cond.notify_all()

    async def hold(self, run: JobRun[Any]) -> str:
        """Report the start, then await the test's gate (bounded); a cancel of the task is recorded."""
        self.enter(run)
        gate = self.gate(run.job_id)
        deadline = time.monotonic() + WAIT
        try:
            while not gate.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
        except asyncio.CancelledError:
            with self._cond:
                self.cancelled.add(run.job_id)
            raise
        return "released"

    def sync_hold(self, run: JobRun[Any]) -> str:
        self.enter(run)
        self.gate(run.job_id).wait(WAIT)
        return "released"

    def started(self, *job_ids: str) -> list[JobRun[Any]]:
        with self._cond:
            assert self._cond.wait_for(lambda: all(j in self.runs for j in job_ids), WAIT), (
                f"bodies {job_ids} never started; started: {sorted(self.runs)}"
            )
            return [self.runs[j] for j in job_ids]

    def release(self, job_id: str) -> None:
        self.gate(job_id).set()

    def release_all(self) -> None:
        with self._cond:
            self._all_open = True
            for event in self._gates.values():
                event.set()


@pytest.fixture
def jobs(any_jobs: AnyJobsEnv) -> AnyJobsEnv:
    return any_jobs


@pytest.fixture
def probe() -> Iterator[AsyncProbe]:
    p = AsyncProbe()
    yield p
    p.release_all()


@pytest.fixture
def make_worker(jobs: AnyJobsEnv, probe: AsyncProbe) -> Iterator[Callable[..., JobWorker]]:
    """Build and start (without the claim loop) a worker over the test's driver and frozen clock; every
    worker built is drained at teardown after every gate is opened."""
    built: list[JobWorker] = []

    def make(*, start: bool = True, **options: Any) -> JobWorker:
        options.setdefault("driver", jobs.driver)
        options.setdefault("context", lambda: {"app": "ctx"})
        options.setdefault("clock", jobs.clock)
        options.setdefault("queues", [QUEUE])
        options.setdefault("concurrency", 1)
        options.setdefault("claim_ahead", 0)
        worker = job_worker(**options)
        built.append(worker)
        if start:
            worker.start(loop=False)
        return worker

    yield make
    probe.release_all()
    for worker in built:
        if worker.state != "stopped":
            worker.drain(deadline_ms=int(WAIT * 1000))


def _one(worker: JobWorker) -> list[Any]:
    """The one flight left, once the refused run's flight has ended."""
    return list(eventually(lambda: worker.in_flight() if len(worker.in_flight()) == 1 else [], timeout=WAIT))


def loop_thread(worker: JobWorker) -> str:
    lane = worker._lane  # the thread's name is the lane's business; the test reads it to tell the kinds apart
    assert lane is not None and lane.thread is not None
    return lane.thread.name


# -- the knob ----------------------------------------------------------------------------------


def test_a_queue_an_async_job_names_gets_100_async_slots_and_the_others_none(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    declare("knob_async", probe.hold)
    declare("knob_sync", probe.sync_hold, queue="plain")
    assert QUEUE in async_queues() and "plain" not in async_queues()

    worker = make_worker(queues=[QUEUE, "plain"], start=False)
    assert worker.async_slots == {QUEUE: 100, "plain": 0}
    assert f"serving {QUEUE} (1 slots, 100 async), plain (1 slots) — " in worker_start_line(worker)
    assert make_worker(queues=[QUEUE, "plain"], async_concurrency=500, start=False).async_slots == {
        QUEUE: 500,
        "plain": 500,
    }
    table = make_worker(queues=[QUEUE, "plain"], async_concurrency={"plain": 3}, start=False)
    assert table.async_slots == {QUEUE: 100, "plain": 3}


@pytest.mark.parametrize("value", [-1, 10_001, True, "500", 2.5])
def test_a_bad_async_concurrency_is_refused_naming_the_option(jobs: AnyJobsEnv, value: Any) -> None:
    with pytest.raises(InvariantError) as caught:
        job_worker(driver=jobs.driver, context=lambda: None, queues=[QUEUE], async_concurrency={QUEUE: value})
    assert caught.value.code == "X_INVARIANT"
    assert f"async_concurrency[{QUEUE!r}] must be a whole number from 0 to 10000" in caught.value.message


def test_a_queue_with_async_concurrency_0_runs_no_async_job_and_offers_it_again_a_minute_later(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    waiting = declare("async_off", probe.hold)
    declare("sync_beside_it", probe.sync_hold)
    (job_id,) = in_order(jobs, waiting, [{"k": 1}])
    worker = make_worker(async_concurrency={QUEUE: 0})
    (disabled,) = events(caplog, "jobs.worker.async-disabled")
    assert disabled.levelno == logging.WARNING and disabled.jobs["queue"] == QUEUE

    assert worker.run_once() == 0  # claimed on the thread room, and handed back: no thread runs async
    record = row(jobs, job_id)
    assert (record.state, record.attempts) == ("ready", 0)
    assert record.run_at_ms == jobs.clock.now_ms() + 60_000
    assert job_id not in probe.runs and events(caplog, "jobs.worker.async-refused")


# -- async runs beside threads -----------------------------------------------------------------


def test_async_bodies_run_many_at_once_on_the_loop_while_sync_bodies_keep_their_threads(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    waiting = declare("many_async", probe.hold)
    blocking = declare("one_sync", probe.sync_hold)
    async_ids = in_order(jobs, waiting, [{"k": n} for n in range(20)])
    (sync_id,) = in_order(jobs, blocking, [{"k": "s"}])
    worker = make_worker(concurrency=1, async_concurrency=20)

    assert worker.run_once() == 21  # one thread slot plus twenty async slots, in one claim
    probe.started(sync_id, *async_ids)  # all twenty at once: none waits for another
    assert {probe.threads[i] for i in async_ids} == {loop_thread(worker)}
    assert probe.threads[sync_id] != loop_thread(worker)
    assert len(worker.in_flight()) == 21
    assert worker.run_once() == 0  # every slot of both kinds taken: no claim

    probe.release_all()
    assert worker.wait_idle(WAIT)
    assert {row(jobs, i).state for i in [*async_ids, sync_id]} == {"done"}
    assert all(row(jobs, i).attempts == 1 for i in [*async_ids, sync_id])
    eventually(lambda: worker.stats.completed == 21, timeout=WAIT)
    assert {e.result for e in worker.executions} == {"released"}


def test_a_claim_hands_back_sync_rows_past_the_free_threads_uncounted_and_asks_less_async_room(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    declare("mixed_async", probe.hold)  # the queue has both kinds: it asks for threads and async room
    blocking = declare("mixed_sync", probe.sync_hold)
    ids = in_order(jobs, blocking, [{"k": n} for n in range(8)])
    worker = make_worker(concurrency=1, async_concurrency=4)

    assert worker.run_once() == 1  # asked 1 thread + 4 async: five sync rows came, one has a thread
    (first,) = [i for i in ids if i in probe.runs or row(jobs, i).state == "running"]
    probe.started(first)
    assert worker.stats.returned == 4
    returned = [i for i in ids if i != first]
    assert all((row(jobs, i).state, row(jobs, i).attempts) == ("ready", 0) for i in returned)

    assert worker.run_once() == 0  # the thread is busy; the async ask halved: two rows claimed, both back
    assert worker.stats.returned == 6
    assert worker.run_once() == 0  # ...then one
    assert worker.stats.returned == 7
    assert all(row(jobs, i).attempts == 0 for i in returned)  # a hand-back burns no attempt

    probe.release_all()

    def all_done() -> bool:
        worker.run_once()
        return all(row(jobs, i).state == "done" for i in ids)

    eventually(all_done, timeout=WAIT)
    assert [row(jobs, i).attempts for i in ids] == [1] * 8


# -- leases, deadlines, cancel, drain ----------------------------------------------------------


def test_the_heartbeat_renews_async_runs_leases(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    waiting = declare("async_lease", probe.hold)
    (job_id,) = in_order(jobs, waiting, [{"k": 1}])
    worker = make_worker(visibility_timeout="30s")
    assert worker.run_once() == 1
    probe.started(job_id)
    for _ in range(6):  # 60 s: twice the window, which only renewals can survive
        jobs.clock.advance(HEARTBEAT_MS)
        assert row(jobs, job_id).lease_until_ms == jobs.clock.now_ms() + 30_000
    assert row(jobs, job_id).state == "running"
    probe.release(job_id)
    assert worker.wait_idle(WAIT)
    assert row(jobs, job_id).state == "done"


def test_the_job_timeout_cancels_the_task_and_retries_the_attempt(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    waiting = declare("async_timeout", probe.hold, timeout="5s", retry={"attempts": 3})
    (job_id,) = in_order(jobs, waiting, [{"k": 1}])
    worker = make_worker()
    assert worker.run_once() == 1
    (run,) = probe.started(job_id)

    jobs.clock.advance(4_999)
    assert not run.signal.aborted and row(jobs, job_id).state == "running"
    jobs.clock.advance(1)
    assert code(run) == "X_JOB_TIMEOUT"
    assert worker.wait_idle(WAIT)
    assert job_id in probe.cancelled  # the body's task was cancelled at its await
    record = row(jobs, job_id)
    assert (record.state, record.attempts, record.last_code) == ("ready", 1, "X_JOB_TIMEOUT")
    (execution,) = worker.executions
    assert (execution.outcome, execution.code) == ("retried", "X_JOB_TIMEOUT")


def test_an_operator_cancel_cancels_the_task_at_the_next_heartbeat(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    waiting = declare("async_cancelled", probe.hold)
    (job_id,) = in_order(jobs, waiting, [{"k": 1}])
    worker = make_worker()
    assert worker.run_once() == 1
    (run,) = probe.started(job_id)

    assert jobs.driver.operator.cancel(job_id, "operator") is not None
    jobs.clock.advance(HEARTBEAT_MS)
    assert code(run) == "X_JOB_LEASE_LOST"
    assert worker.wait_idle(WAIT)
    assert job_id in probe.cancelled
    record = row(jobs, job_id)
    assert (record.state, record.last_code) == ("cancelled", "X_JOB_CANCELLED")
    assert worker.executions[0].landed is False  # the fenced settle did not un-cancel it


def test_the_drain_cancels_async_tasks_hands_their_rows_back_uncounted_and_stops_the_loop(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    waiting = declare("async_drained", probe.hold)
    blocking = declare("sync_drained", probe.sync_hold)
    async_ids = in_order(jobs, waiting, [{"k": n} for n in range(3)])
    (sync_id,) = in_order(jobs, blocking, [{"k": "s"}])
    worker = make_worker(concurrency=1, async_concurrency=3)
    assert worker.run_once() == 4
    # the sync body too must have started before the drain: a run its slot thread has not yet taken is
    # still in the claim-ahead buffer, and the drain hands that row back unrun (ready, not done)
    *runs, _ = probe.started(*async_ids, sync_id)
    lane = worker._lane
    assert lane is not None

    drainer = threading.Thread(
        target=closing_connections(lambda: worker.drain(deadline_ms=int(WAIT * 1000))), name="test-drain"
    )
    drainer.start()
    eventually(lambda: all(code(r) == "X_DRAINING" for r in runs), timeout=WAIT)
    eventually(lambda: set(async_ids) <= probe.cancelled, timeout=WAIT)
    probe.release(sync_id)  # the sync body returns normally after the abort: completed
    drainer.join(WAIT)
    assert not drainer.is_alive() and worker.state == "stopped"

    for job_id in async_ids:
        record = row(jobs, job_id)
        assert (record.state, record.attempts, record.last_code) == ("ready", 0, "X_DRAINING")
        assert record.run_at_ms is not None and record.run_at_ms <= jobs.clock.now_ms()
    assert row(jobs, sync_id).state == "done"
    assert sorted(e.outcome or "" for e in worker.executions) == ["completed"] + ["interrupted"] * 3
    assert worker.stats.interrupted == 3 and worker.stats.abandoned == 0
    assert lane.thread is not None and not lane.thread.is_alive()


def test_a_claim_takes_async_rows_ahead_and_a_run_that_ends_starts_the_next_one_waiting(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    waiting = declare("async_ahead", probe.hold)
    ids = in_order(jobs, waiting, [{"k": n} for n in range(7)])
    worker = make_worker(concurrency=1, async_concurrency=4)  # short runs: a quarter of 4 slots claimed ahead

    assert worker.run_once() == 5  # four start, one waits in the buffer with its lease renewed
    running = ids[:4]
    probe.started(*running)
    assert len(worker.in_flight()) == 5 and ids[4] not in probe.runs
    assert row(jobs, ids[4]).state == "running"  # claimed: no other worker takes it meanwhile
    assert worker.run_once() == 0  # four busy, the buffer full: no claim

    probe.release(running[0])  # a run ends: the one waiting starts from the loop, with no claim between
    probe.started(ids[4])
    probe.release_all()

    def all_done() -> bool:
        worker.run_once()
        return all(row(jobs, i).state == "done" for i in ids)

    eventually(all_done, timeout=WAIT)
    assert [row(jobs, i).attempts for i in ids] == [1] * 7


def test_the_drain_hands_back_an_async_row_waiting_in_the_claim_ahead_buffer_at_once_and_uncounted(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    waiting = declare("async_ahead_drained", probe.hold)
    ids = in_order(jobs, waiting, [{"k": n} for n in range(5)])
    worker = make_worker(concurrency=1, async_concurrency=4)
    assert worker.run_once() == 5
    probe.started(*ids[:4])

    drainer = threading.Thread(
        target=closing_connections(lambda: worker.drain(deadline_ms=int(WAIT * 1000))), name="test-drain"
    )
    drainer.start()
    drainer.join(WAIT)
    assert not drainer.is_alive() and worker.state == "stopped"

    buffered = row(jobs, ids[4])
    assert (buffered.state, buffered.attempts) == ("ready", 0)  # back at once, the attempt uncounted
    assert ids[4] not in probe.runs  # it never started
    assert all((row(jobs, i).state, row(jobs, i).attempts) == ("ready", 0) for i in ids[:4])
    assert worker.stats.interrupted == 5 and worker.stats.abandoned == 0


# -- limits, fleet keys, on_settled, the settle buffer ----------------------------------------


def test_a_process_limit_sheds_async_rows_uncounted(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    waiting = declare("async_limited", probe.hold)
    ids = in_order(jobs, waiting, [{"k": n} for n in range(3)])
    worker = make_worker(async_concurrency=3, limits=LimitConfig(per_queue={QUEUE: 1}))
    assert worker.run_once() == 1
    assert worker.stats.shed == 2
    assert sorted((row(jobs, i).state, row(jobs, i).attempts) for i in ids) == [
        ("ready", 0),
        ("ready", 0),
        ("running", 1),
    ]


def test_a_busy_fleet_key_under_fail_refuses_an_async_run_and_a_held_slot_is_renewed(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker]
) -> None:
    keyed = declare("async_keyed", probe.hold, concurrency=Concurrency(key=lambda i: "acct", limit=1, when_busy="fail"))
    ids = in_order(jobs, keyed, [{"k": 1}, {"k": 2}])
    worker = make_worker(async_concurrency=2)
    assert worker.run_once() == 2  # both start at once; whichever takes the key first runs

    def refused() -> list[str]:
        return [i for i in ids if (row(jobs, i).state, row(jobs, i).last_code) == ("failed", "X_JOB_KEY_BUSY")]

    (second,) = eventually(refused, timeout=WAIT)
    (first,) = [i for i in ids if i != second]
    probe.started(first)
    assert second not in probe.runs  # the refused body never ran
    (holder,) = _one(worker)
    [(key, _)] = holder.slots
    assert key.startswith("job-key:async_keyed:")
    jobs.clock.advance(HEARTBEAT_MS)  # the fleet slot is renewed with the lease: nobody takes it
    assert not holder.lost and not probe.runs[first].signal.aborted
    probe.release(first)
    assert worker.wait_idle(WAIT)
    assert row(jobs, first).state == "done"
    assert sorted(e.outcome or "" for e in worker.executions) == ["completed", "refused"]


def test_on_settled_hears_an_async_run_once_after_its_row_is_done(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker]
) -> None:
    told: list[tuple[str, str, Any, str]] = []

    def hear(settled: Settled) -> None:
        told.append((settled.job_id, settled.outcome, settled.result, row(jobs, settled.job_id).state))

    async def answers(run: JobRun[Any]) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"k": run.input["k"]}

    handle = declare("async_settled", answers, on_settled=hear)
    (job_id,) = in_order(jobs, handle, [{"k": 7}])
    worker = make_worker()
    assert worker.run_once() == 1
    assert worker.wait_idle(WAIT)
    assert told == [(job_id, "completed", {"k": 7}, "done")]


def test_async_completions_settle_through_the_settle_buffer(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker]
) -> None:
    async def quick(run: JobRun[Any]) -> None:
        await asyncio.sleep(0)

    handle = declare("async_buffered", quick)
    ids = in_order(jobs, handle, [{"k": n} for n in range(5)])
    driver = HeldAcks(jobs.driver)
    worker = make_worker(driver=driver, async_concurrency=5)
    try:
        assert worker.run_once() == 5
        assert driver.entered.acquire(timeout=WAIT)  # a settle is on the wire, held: the runs are over...
        assert worker.wait_idle(0.05) is False  # ...and a flight is released only once its settle landed
    finally:
        driver.open.set()
    assert worker.wait_idle(WAIT)
    assert sorted(i for batch in driver.batches for i in batch) == sorted(ids)  # every one through ack_many
    assert all(row(jobs, i).state == "done" for i in ids)
    assert all(e.completion is not None and e.landed for e in worker.executions)


# -- the watchdog ------------------------------------------------------------------------------

STALL_MS = 300
HOLD_MAX_S = 3 * WAIT  # the blocking body's own bound, past the test's two waits: only a broken test reaches it


@pytest.mark.slow
@pytest.mark.parametrize("any_jobs", ["memory"], indirect=True)
def test_a_body_that_blocks_the_loop_is_logged_by_name_and_id_and_leases_are_still_renewed(
    any_jobs: AnyJobsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    """On the wall clock: the heartbeat runs on its own thread every 100 ms over a 600 ms window. The body
    holds the loop until the test has seen the watchdog report it and the row outlive the lease it was
    claimed with — a lease not renewed while the loop is held would have lapsed — however long that takes
    on a loaded machine (a fixed block raced the watchdog and the heartbeat against the clock)."""
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    blocking = threading.Event()
    held = threading.Lock()
    held.acquire()  # the test releases it once it has seen what it waits for

    async def blocks_the_loop(run: JobRun[Any]) -> str:
        blocking.set()
        held.acquire(timeout=HOLD_MAX_S)  # the mistake under test: a blocking call inside async def
        return "woke"

    handle = declare("blocks_the_loop", blocks_the_loop)
    clock = SystemClock()
    driver = MemoryDriver(clock=clock, visibility_timeout_ms=600)
    worker = job_worker(driver=driver, context=lambda: None, queues=[QUEUE], clock=clock, heartbeat_interval="100ms")
    worker.loop_stall_ms = STALL_MS
    job_id = driver.enqueue(handle.build_request({"k": 1})).id
    worker.start(loop=False)
    try:
        try:
            assert worker.run_once() == 1
            assert blocking.wait(WAIT)
            record = driver.operator.get(job_id)
            assert record is not None and record.lease_until_ms is not None
            claimed_until = record.lease_until_ms

            def outlived_its_claim_lease() -> bool:
                later = driver.operator.get(job_id)
                assert later is not None and later.state == "running"
                now = clock.now_ms()
                return now > claimed_until and (later.lease_until_ms or 0) > now

            eventually(lambda: events(caplog, "jobs.worker.loop-blocked"), timeout=WAIT)
            eventually(outlived_its_claim_lease, timeout=WAIT, interval=0.02)
        finally:
            held.release()  # the body returns: the loop answers again
        assert worker.wait_idle(WAIT)
    finally:
        worker.drain(deadline_ms=int(WAIT * 1000))

    (blocked,) = events(caplog, "jobs.worker.loop-blocked")
    assert blocked.levelno == logging.WARNING
    assert (blocked.jobs["name"], blocked.jobs["job_id"], blocked.jobs["attempt"]) == ("blocks_the_loop", job_id, 1)
    assert "test_worker_async.py" in blocked.jobs["where"] and blocked.jobs["blocked_ms"] >= STALL_MS
    (unblocked,) = events(caplog, "jobs.worker.loop-unblocked")
    assert unblocked.jobs["job_id"] == job_id and unblocked.jobs["blocked_ms"] >= blocked.jobs["blocked_ms"]
    assert not events(caplog, "jobs.lease.lost")
    record = driver.operator.get(job_id)
    assert record is not None and (record.state, record.attempts) == ("done", 1)


def test_an_async_run_waiting_for_its_rate_instant_keeps_its_claim_and_starts_on_it(
    jobs: AnyJobsEnv, probe: AsyncProbe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    """As the sync run does (tests/postgres/test_worker.py): an async run whose reserved instant is beyond the
    slot's own wait leaves its async slot with its claim kept, and is back on the loop to start on its instant."""
    started: dict[int, int] = {}

    async def metered(run: JobRun[Any]) -> None:
        started[run.input["k"]] = jobs.clock.now_ms()
        probe.enter(run)

    handle = declare("metered_async_kept", metered, rate_limit="2/s")  # one start every 500 ms
    first, second = in_order(jobs, handle, [{"k": 0}, {"k": 1}])
    worker = make_worker(async_concurrency=1)
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")

    assert worker.run_once() == 1
    probe.started(first)
    eventually(lambda: not worker.in_flight())
    assert worker.run_once() == 1
    eventually(lambda: worker.stats.kept == 1)
    assert (row(jobs, second).state, len(worker.in_flight())) == ("running", 1)  # claim and flight kept
    assert not events(caplog, "jobs.job.rate-limited")

    jobs.clock.advance(started[0] + 500 - jobs.clock.now_ms() - 100)
    probe.started(second)
    assert worker.wait_idle(WAIT)
    assert started[1] - started[0] == 500
    assert [(row(jobs, i).state, row(jobs, i).attempts) for i in (first, second)] == [("done", 1)] * 2
