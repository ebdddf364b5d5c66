"""The one lifecycle every role shares (``ultimate_jobs.runtime.lifecycle.RoleLifecycle``), run once over the three
roles — the worker, the outbox relay, the scheduler — on the memory driver and on Postgres.

Each role is given one piece of work that holds until the test opens a gate (a job body, a publish, a
task's round), so "work in flight" is real: SIGTERM drains in two phases (stop taking work at once, then
wait for the work), ``close(deadline_ms)`` is bounded by wall-clock time, and ``stop()`` waits — a
sooner bound from a later call shortens a wait already running.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import transaction

from tests.conftest import installed
from tests.helpers import eventually
from ultimate_jobs import JobRun, job, job_scheduler, job_worker, task
from ultimate_jobs.contracts.jobs import Enqueued, EnqueueRequest
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.outbox import OutboxRouter, memory_outbox_store, outbox_relay, postgres_outbox_store
from ultimate_jobs.runtime.dbconn import close_thread_connections
from ultimate_jobs.runtime.lifecycle import RoleLifecycle
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WAIT = 10.0
HOUR = 3_600_000


@dataclass
class Held:
    """A role with one piece of work that holds until ``gate`` opens (``entered`` tells it began)."""

    role: RoleLifecycle
    prefix: str
    entered: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event = field(default_factory=threading.Event)
    begin: Callable[[], None] = lambda: None
    """Put the work in flight on a role started with ``loop=False`` (a pass on another thread)."""
    threads: list[threading.Thread] = field(default_factory=list)

    def hold(self) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT), "the test never opened the gate"


def worker_role(driver: Any, clock: FrozenClock) -> Held:
    held: Held

    @job(name="held_job", idempotency_key=lambda i: "k", tenant="none")
    def held_job(run: JobRun[Any]) -> None:
        held.hold()  # ignores its signal: a body a drain cannot cut short

    worker = job_worker(driver=driver, clock=clock, context=dict, concurrency=1, claim_ahead=0, drain_deadline="10s")
    held = Held(worker, "jobs.worker")
    held_job.enqueue({})
    held.begin = lambda: worker.run_once() and None
    return held


class GatedDriver:
    """The driver, its publishes held at ``held.hold()``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.held: Held | None = None

    def enqueue_many(self, requests: list[EnqueueRequest]) -> list[Enqueued]:
        assert self.held is not None
        self.held.hold()
        answers: list[Enqueued] = self.inner.enqueue_many(requests)
        return answers


def relay_role(driver: Any, clock: FrozenClock) -> Held:
    store = memory_outbox_store(clock=clock, current_tx=lambda: True) if isinstance(driver, MemoryDriver) else None
    store = store or postgres_outbox_store(clock=clock)

    @job(name="relayed_job", idempotency_key=lambda i: "k", tenant="none")
    def relayed_job(run: JobRun[Any]) -> None:
        return None

    set_jobs_router(OutboxRouter(store=store, driver=driver))
    try:
        with transaction.atomic():
            relayed_job.enqueue({})
    finally:
        set_jobs_router(None)
    gated = GatedDriver(driver)
    relay = outbox_relay(store=store, driver=gated, clock=clock, interval="10ms", drain_deadline="10s")
    held = Held(relay, "jobs.outbox.relay")
    gated.held = held
    held.begin = lambda: on_a_thread(held, relay.run_once)
    return held


def scheduler_role(driver: Any, clock: FrozenClock) -> Held:
    held: Held

    @job(name="hourly_job", idempotency_key=lambda i: str(i["at"]), tenant="none")
    def hourly_job(run: JobRun[Any]) -> None:
        return None

    @task(cron="0 * * * *", tz="UTC", catch_up="run-all", name="held_task")
    def held_task(occurrence_ms: int) -> list[Any]:
        if held.role.state != "idle":  # the round under test holds; the priming round does not
            held.hold()
        return [(hourly_job, {"at": occurrence_ms})]

    primer = job_scheduler(driver=driver, clock=clock, tasks=[held_task])
    held = Held(primer, "jobs.scheduler")
    primer.start(loop=False)
    primer.run_once()  # the watermark is set, the lease handed back below
    primer.stop()
    clock.advance(HOUR)  # one occurrence is due for the scheduler under test
    scheduler = job_scheduler(driver=driver, clock=clock, tasks=[held_task], tick_interval="10ms", drain_deadline="10s")
    held.role = scheduler
    held.begin = lambda: on_a_thread(held, scheduler.run_once)
    return held


def on_a_thread(held: Held, call: Callable[[], Any]) -> threading.Thread:
    """``call`` on a thread of its own, which closes its database connections when it ends."""

    def run() -> None:
        try:
            call()
        finally:
            close_thread_connections()

    thread = threading.Thread(target=run, name="test-thread", daemon=True)
    held.threads.append(thread)
    thread.start()
    return thread


ROLES = {"worker": worker_role, "relay": relay_role, "scheduler": scheduler_role}


@pytest.fixture(params=["memory", "postgres"])
def driver(request: pytest.FixtureRequest) -> Iterator[tuple[Any, FrozenClock]]:
    clock = FrozenClock()
    chosen = MemoryDriver(clock=clock) if request.param == "memory" else PostgresDriver(clock=clock)
    with installed(clock, chosen):
        yield chosen, clock


@pytest.fixture(params=list(ROLES))
def held(request: pytest.FixtureRequest, driver: tuple[Any, FrozenClock]) -> Iterator[Held]:
    built = ROLES[request.param](*driver)
    try:
        yield built
    finally:
        built.gate.set()  # whatever the test did, the held work may end
        built.role.stop(WAIT * 1000)
        for thread in built.threads:
            thread.join(WAIT)
        # an abandoned close leaves the held job's slot thread to finish on its own: wait it out, so no
        # connection outlives the test
        eventually(lambda: not any(t.name.startswith("jobs-") for t in threading.enumerate()), timeout=WAIT)


def in_flight(held: Held) -> None:
    held.role.start(loop=False)
    held.begin()
    assert held.entered.wait(WAIT), "the work never began"


def test_sigterm_stops_taking_work_at_once_then_waits_for_the_work(
    held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    answers: list[str] = []

    def operator() -> None:
        assert held.entered.wait(WAIT), "the loop never began the work"
        os.kill(os.getpid(), signal.SIGTERM)
        eventually(lambda: held.role.state == "draining", timeout=WAIT)
        time.sleep(0.2)  # the drain waits on the work: it must not have stopped
        answers.append(held.role.state)
        held.gate.set()

    helper = on_a_thread(held, operator)
    try:
        with caplog.at_level(logging.INFO, logger="ultimate_jobs"):
            held.role.run()  # blocks: the loop puts the work in flight; SIGTERM drains it
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    helper.join(WAIT)
    assert answers == ["draining"]
    assert held.role.state == "stopped" and held.role.stop() is True  # finished inside the deadline
    events = [r.getMessage() for r in caplog.records]
    assert f"{held.prefix}.draining" in events and f"{held.prefix}.stopped" in events
    assert f"{held.prefix}.drain-abandoned" not in events


def test_close_is_bounded_by_a_wall_clock_deadline(held: Held, caplog: pytest.LogCaptureFixture) -> None:
    in_flight(held)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
        assert held.role.close(200) is False  # the work still holds at the deadline
    took = time.monotonic() - started
    assert 0.2 <= took < 5, took
    assert held.role.state == "stopped"
    assert [r.getMessage() for r in caplog.records].count(f"{held.prefix}.drain-abandoned") == 1


def test_stop_waits_for_the_work_and_a_sooner_bound_shortens_the_wait(
    held: Held, caplog: pytest.LogCaptureFixture
) -> None:
    in_flight(held)
    answers: list[bool] = []
    waiting = on_a_thread(held, lambda: answers.append(held.role.stop()))  # unbounded
    eventually(lambda: held.role.state == "draining", timeout=WAIT)
    time.sleep(0.2)
    assert waiting.is_alive() and answers == []  # stop() waits for the work in flight
    with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
        sooner = on_a_thread(held, lambda: answers.append(held.role.stop(300)))
        for thread in (waiting, sooner):
            thread.join(WAIT)
            assert not thread.is_alive()
    assert answers == [False, False]  # every waiter answers the one verdict
    assert [r.getMessage() for r in caplog.records].count(f"{held.prefix}.drain-abandoned") == 1


def test_stop_answers_true_when_the_work_ends_and_a_stopped_role_never_starts_again(held: Held) -> None:
    in_flight(held)
    answers: list[bool] = []
    waiting = on_a_thread(held, lambda: answers.append(held.role.stop()))
    eventually(lambda: held.role.state == "draining", timeout=WAIT)
    held.gate.set()
    waiting.join(WAIT)
    assert answers == [True] and held.role.state == "stopped"
    with pytest.raises(UltimateError) as refused:
        held.role.start()
    assert refused.value.code == "X_INVARIANT"


def test_accept_returns_at_once_and_takes_no_more_work(held: Held) -> None:
    in_flight(held)
    started = time.monotonic()
    held.role.accept(reason="test")
    assert time.monotonic() - started < 1 and held.role.state == "draining"
    held.gate.set()
    for thread in held.threads:  # the pass in flight ends (a second pass would wait behind it)
        thread.join(WAIT)
    assert held.role.run_once() == 0  # type: ignore[attr-defined]  # every role's pass takes no work now
    assert held.role.close(WAIT * 1000) is True
