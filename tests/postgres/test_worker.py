"""The worker role on every driver (memory, Postgres) and the frozen clock: slots, leases, deadlines,
the drain, cancel, limits, keyed concurrency, refusal at start, the registry row, progress and logging.

Bodies that must stay running block on a per-job gate (a bounded ``threading.Event`` wait); time
moves only through ``jobs.clock.advance()``, which fires the worker's heartbeat on the test thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection, connections, transaction
from prometheus_client import REGISTRY

from tests.conftest import ON_POSTGRES, AnyJobsEnv
from tests.helpers import eventually
from ultimate_jobs import Concurrency, JobRun, current_signal, job
from ultimate_jobs.contracts.jobs import Heartbeat, Progress
from ultimate_jobs.contracts.operator import JobRecord
from ultimate_jobs.contracts.protocol import JobDriver
from ultimate_jobs.core import registry
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.core.execute import Settled, job_lease_key
from ultimate_jobs.core.installed import set_job_clock
from ultimate_jobs.core.outcomes import tenant_lease_key
from ultimate_jobs.core.rates import RATE_LEAD_MS
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.guards.limits import LimitConfig, Limiter
from ultimate_jobs.worker import JobWorker, job_worker

QUEUE = "wq"
HEARTBEAT_MS = 10_000  # a third of the default 30 s visibility timeout
WAIT = 5.0  # the bound on every cross-thread wait; a passing test never spends it


class Probe:
    """What the bodies report: each run that started, and a gate per job the test opens."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.runs: dict[str, JobRun[Any]] = {}
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
            self._cond.notify_all()

    def hold(self, run: JobRun[Any]) -> None:
        """Report the start, then block until the test opens this job's gate."""
        self.enter(run)
        self.gate(run.job_id).wait(WAIT)

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


class Delegating:
    """A driver that forwards everything to ``inner``; subclasses override the member under test."""

    def __init__(self, inner: JobDriver) -> None:
        self.inner = inner
        self.name = inner.name
        self.supports_listen = inner.supports_listen

    @property
    def operator(self) -> Any:
        return self.inner.operator

    @property
    def leases(self) -> Any:
        return self.inner.leases

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


class FailingHeartbeat(Delegating):
    """Renewals land until ``broken`` is set; from then on every one raises, as a lost connection does."""

    broken = False

    def heartbeat(self, beats: Sequence[Heartbeat], *, visibility_timeout_ms: int) -> frozenset[str]:
        if self.broken:
            raise ConnectionError("the database went away")
        return self.inner.heartbeat(beats, visibility_timeout_ms=visibility_timeout_ms)


class NoLeaseStore(Delegating):
    """A driver with no lease store (the spec's redis driver)."""

    @property
    def leases(self) -> Any:
        return None


@pytest.fixture
def jobs(any_jobs: AnyJobsEnv) -> AnyJobsEnv:
    """Every test here runs once per driver (``any_jobs``); a test pinned to ``any_jobs=["memory"]``
    says why."""
    return any_jobs


memory_only = pytest.mark.parametrize("any_jobs", ["memory"], indirect=True)
postgres_only = pytest.mark.parametrize("any_jobs", [pytest.param("postgres", marks=ON_POSTGRES)], indirect=True)


@pytest.fixture
def probe() -> Iterator[Probe]:
    p = Probe()
    yield p
    p.release_all()


@pytest.fixture
def make_worker(jobs: AnyJobsEnv, probe: Probe) -> Iterator[Callable[..., JobWorker]]:
    """Build (and by default start, without the claim loop) a worker over the test's driver and frozen
    clock; every worker built is drained at teardown after every gate is opened."""
    built: list[JobWorker] = []

    def make(*, start: bool = True, **options: Any) -> JobWorker:
        options.setdefault("driver", jobs.driver)
        options.setdefault("context", lambda: {"app": "ctx"})
        options.setdefault("clock", jobs.clock)
        options.setdefault("queues", [QUEUE])
        options.setdefault("concurrency", 2)
        options.setdefault("claim_ahead", 0)  # slot arithmetic stays exact; the claim-ahead tests set their own
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


def declare(name: str, body: Callable[[JobRun[Any]], Any], **options: Any) -> JobHandle[Any, Any]:
    """A throwaway job on the test queue; the input's ``k`` is its idempotency key."""
    options.setdefault("queue", QUEUE)
    options.setdefault("tenant", "none")
    return job(name=name, idempotency_key=lambda i: f"{name}:{i['k']}", **options)(body)


def in_order(jobs: AnyJobsEnv, handle: JobHandle[Any, Any], inputs: Sequence[dict[str, Any]]) -> list[str]:
    """Enqueue ``inputs`` a millisecond apart, so the claim hands them out in this order."""
    ids = []
    for payload in inputs:
        ids.append(handle.enqueue(payload).id)
        jobs.clock.advance(1)
    return ids


def row(jobs: AnyJobsEnv, job_id: str) -> JobRecord:
    record = jobs.driver.operator.get(job_id)
    assert record is not None
    return record


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ultimate_jobs" and r.getMessage() == name]


def code(run: JobRun[Any]) -> str | None:
    reason = run.signal.reason
    return None if reason is None else reason.code


def closing_connections(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` for a thread the test starts: the Django connection the call opened on that thread (the
    Postgres driver's statements) is closed when it returns, as every thread that opens one must."""

    def run() -> None:
        try:
            fn()
        finally:
            connections.close_all()

    return run


def lost_counter(queue: str) -> float:
    return REGISTRY.get_sample_value("job_leases_lost_total", {"queue": queue}) or 0.0


# -- slots -------------------------------------------------------------------------------------


def test_a_pass_claims_only_the_free_slots(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    blocked = declare("slots_blocked", probe.hold)
    ids = [blocked.enqueue({"k": n}).id for n in range(4)]
    worker = make_worker(concurrency=2)

    assert worker.run_once() == 2
    running = [i for i in ids if row(jobs, i).state == "running"]
    assert len(running) == 2
    probe.started(*running)
    assert worker.run_once() == 0  # both slots taken: no claim at all
    assert sum(row(jobs, i).state == "ready" for i in ids) == 2

    probe.release(running[0])
    eventually(lambda: len(worker.in_flight()) == 1, timeout=WAIT)
    assert worker.run_once() == 1
    assert sum(row(jobs, i).state == "running" for i in ids) == 2
    assert worker.stats.claimed == 3


def test_concurrency_table_sizes_each_queue(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    blocked = declare("slots_table", probe.hold)
    for n in range(3):
        blocked.enqueue({"k": f"a{n}"}, queue="qa")
        blocked.enqueue({"k": f"b{n}"}, queue="qb")
    worker = make_worker(queues=["qa", "qb", "qc"], concurrency={"qa": 1, "qb": 3})

    assert worker.slots == {"qa": 1, "qb": 3, "qc": 8}  # an unnamed queue gets JOBS_CONCURRENCY_DEFAULT
    assert worker.run_once() == 4
    stats = {s.queue: s for s in jobs.driver.stats()}
    assert (stats["qa"].running, stats["qa"].ready) == (1, 2)
    assert (stats["qb"].running, stats["qb"].ready) == (3, 0)


# -- leases ------------------------------------------------------------------------------------


def test_heartbeat_keeps_moving_the_lease(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    blocked = declare("lease_renewed", probe.hold)
    job_id = blocked.enqueue({"k": 1}).id
    worker = make_worker(visibility_timeout="30s")
    assert worker.heartbeat_interval_ms == HEARTBEAT_MS
    worker.run_once()
    probe.started(job_id)
    first = row(jobs, job_id).lease_until_ms
    assert first == jobs.clock.now_ms() + 30_000

    leases = []
    for _ in range(6):  # 60 s: twice the window, which only renewals can survive
        jobs.clock.advance(HEARTBEAT_MS)
        leases.append(row(jobs, job_id).lease_until_ms)
        assert leases[-1] == jobs.clock.now_ms() + 30_000
    assert leases == sorted(set(leases)) and leases[0] > first
    assert row(jobs, job_id).state == "running"
    assert not events(caplog, "jobs.lease.lost") and not events(caplog, "jobs.heartbeat.failed")
    assert not probe.runs[job_id].signal.aborted

    probe.release(job_id)
    assert worker.wait_idle(WAIT)
    assert row(jobs, job_id).state == "done"


def test_failing_heartbeats_warn_then_lose_the_lease(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    queue = "hb-fail"

    def waits_on_signal(run: JobRun[Any]) -> None:
        probe.enter(run)
        run.signal.wait(WAIT)
        run.signal.throw_if_aborted()

    handle = declare("lease_lost", waits_on_signal, queue=queue)
    job_id = handle.enqueue({"k": 1}).id
    driver = FailingHeartbeat(jobs.driver)
    worker = make_worker(driver=driver, queues=[queue], visibility_timeout="30s")
    before = lost_counter(queue)
    worker.run_once()
    (run,) = probe.started(job_id)

    jobs.clock.advance(2 * HEARTBEAT_MS)  # two renewals land; the window runs from the last of them
    driver.broken = True

    jobs.clock.advance(HEARTBEAT_MS)
    failed = events(caplog, "jobs.heartbeat.failed")
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert failed[0].jobs["job_id"] == job_id
    jobs.clock.advance(HEARTBEAT_MS)
    assert len(events(caplog, "jobs.heartbeat.failed")) == 2
    assert not events(caplog, "jobs.lease.lost") and not run.signal.aborted
    assert lost_counter(queue) == before

    jobs.clock.advance(HEARTBEAT_MS)  # a whole window (30 s) since the last renewal that landed
    lost = events(caplog, "jobs.lease.lost")
    assert len(lost) == 1 and lost[0].levelno == logging.ERROR
    assert lost[0].jobs["job_id"] == job_id and lost[0].jobs["queue"] == queue
    assert lost_counter(queue) == before + 1
    assert worker.stats.leases_lost == 1
    assert code(run) == "X_JOB_LEASE_LOST"

    assert worker.wait_idle(WAIT)
    jobs.clock.advance(HEARTBEAT_MS)  # reported once, never again
    assert len(events(caplog, "jobs.lease.lost")) == 1 and lost_counter(queue) == before + 1
    (execution,) = worker.executions
    assert (execution.outcome, execution.code) == ("retried", "X_JOB_LEASE_LOST")


def test_no_lease_loss_for_a_job_that_finished_under_a_renewal(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    blocked = declare("finished_under_beat", probe.hold)
    job_id = blocked.enqueue({"k": 1}).id
    answers: list[frozenset[str]] = []

    class AckRacesTheBeat(Delegating):
        """The renewal is on the wire while the job acks: it lands after the row is done."""

        def heartbeat(self, beats: Sequence[Heartbeat], *, visibility_timeout_ms: int) -> frozenset[str]:
            probe.release(job_id)
            eventually(lambda: row(jobs, job_id).state == "done", timeout=WAIT, interval=0.002)
            answer = self.inner.heartbeat(beats, visibility_timeout_ms=visibility_timeout_ms)
            answers.append(answer)
            return answer

    worker = make_worker(driver=AckRacesTheBeat(jobs.driver))
    worker.run_once()
    probe.started(job_id)
    jobs.clock.advance(HEARTBEAT_MS)

    assert answers == [frozenset()]  # the fenced renewal came back unowned...
    assert worker.wait_idle(WAIT)
    assert not events(caplog, "jobs.lease.lost")  # ...and nobody was paged for it
    assert not events(caplog, "jobs.heartbeat.failed")
    assert worker.stats.leases_lost == 0
    assert worker.executions[0].outcome == "completed"


# -- deadlines and cancel ----------------------------------------------------------------------


def test_timeout_aborts_the_signal_and_retries_the_attempt(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")

    def overstays(run: JobRun[Any]) -> str:
        probe.enter(run)
        run.signal.wait(WAIT)
        probe.gate(run.job_id).wait(WAIT)  # returns normally, after the cancel: the abandoned case
        return "late"

    handle = declare("overstays", overstays, timeout="5s")
    job_id = handle.enqueue({"k": 1}).id
    worker = make_worker()
    worker.run_once()
    (run,) = probe.started(job_id)

    jobs.clock.advance(4_999)
    assert not run.signal.aborted and row(jobs, job_id).state == "running"
    jobs.clock.advance(1)
    assert code(run) == "X_JOB_TIMEOUT"
    record = row(jobs, job_id)
    assert (record.state, record.attempts, record.last_code) == ("ready", 1, "X_JOB_TIMEOUT")
    assert record.run_at_ms > jobs.clock.now_ms()  # the backoff, not at once
    assert not events(caplog, "jobs.timeout.abandoned")

    probe.release(job_id)
    assert worker.wait_idle(WAIT)
    abandoned = events(caplog, "jobs.timeout.abandoned")
    assert len(abandoned) == 1 and abandoned[0].jobs["job_id"] == job_id
    (execution,) = worker.executions
    assert (execution.outcome, execution.code, execution.abandoned) == ("retried", "X_JOB_TIMEOUT", True)
    assert row(jobs, job_id).state == "ready"  # the late return did not ack
    assert worker.stats.retried == 1 and worker.stats.completed == 0


def test_a_timed_out_body_still_running_does_not_hide_the_next_attempt(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker]
) -> None:
    started = {1: threading.Event(), 2: threading.Event()}
    release = {1: threading.Event(), 2: threading.Event()}
    try:

        def ignores_its_deadline(run: JobRun[Any]) -> None:
            started[run.attempt].set()
            release[run.attempt].wait(WAIT)

        handle = declare("zombie", ignores_its_deadline, timeout="5s", retry={"attempts": 3, "jitter": False})
        job_id = handle.enqueue({"k": 1}).id
        worker = make_worker()
        first_beat = jobs.clock.now_ms() + HEARTBEAT_MS
        worker.run_once()
        assert started[1].wait(WAIT)
        jobs.clock.advance(5_000)  # attempt 1 times out; its body keeps its slot
        jobs.clock.advance(1_000)  # the backoff: the row is due again
        assert worker.run_once() == 1  # the same worker claims attempt 2 beside its own zombie
        assert started[2].wait(WAIT)

        release[1].set()  # the zombie returns: abandoned
        eventually(lambda: len(worker.executions) == 1, timeout=WAIT)
        assert [(f.job.id, f.job.attempt) for f in worker.in_flight()] == [(job_id, 2)]

        jobs.clock.set(first_beat)  # attempt 2's lease is still renewed (inside its own 5 s)...
        assert row(jobs, job_id).lease_until_ms == jobs.clock.now_ms() + 30_000
        release[2].set()
        assert worker.wait_idle(WAIT)  # ...and it settles
        assert row(jobs, job_id).state == "done"
        assert [e.outcome for e in worker.executions] == ["retried", "completed"]
    finally:
        for event in release.values():
            event.set()


def test_cancel_stops_a_running_body(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")

    def waits_on_signal(run: JobRun[Any]) -> None:
        probe.enter(run)
        run.signal.wait(WAIT)
        run.signal.throw_if_aborted()

    handle = declare("cancelled_mid_run", waits_on_signal)
    job_id = handle.enqueue({"k": 1}).id
    worker = make_worker()
    worker.run_once()
    (run,) = probe.started(job_id)

    assert jobs.driver.operator.cancel(job_id, "operator") is not None
    assert not run.signal.aborted  # cooperative: the worker hears it at its next renewal
    jobs.clock.advance(HEARTBEAT_MS)
    assert code(run) == "X_JOB_LEASE_LOST"
    assert worker.wait_idle(WAIT)

    record = row(jobs, job_id)
    assert (record.state, record.last_code) == ("cancelled", "X_JOB_CANCELLED")
    assert worker.executions[0].landed is False  # the fenced settle did not un-cancel it
    assert events(caplog, "jobs.job.cancelled")
    assert not events(caplog, "jobs.lease.lost") and worker.stats.leases_lost == 0


@postgres_only
def test_cancel_rolls_back_a_transactional_step_that_is_running(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    """A cancel heard while ``run.step.atomic``'s function runs: the step's signal aborts, and its write
    rolls back with the checkpoint it never wrote."""

    def mark_paid(run: JobRun[Any]) -> None:
        Group.objects.create(name="paid-then-cancelled")
        probe.enter(run)
        current_signal().wait(WAIT)  # the step's own signal: aborted with its run's

    handle = declare("cancelled_in_step", lambda run: run.step.atomic("mark-paid", lambda: mark_paid(run)))
    job_id = handle.enqueue({"k": 1}).id
    worker = make_worker()
    worker.run_once()
    probe.started(job_id)

    assert jobs.driver.operator.cancel(job_id, "operator") is not None
    jobs.clock.advance(HEARTBEAT_MS)  # the renewal hears the cancel
    assert worker.wait_idle(WAIT)
    record = row(jobs, job_id)
    assert (record.state, record.last_code) == ("cancelled", "X_JOB_CANCELLED")
    assert not Group.objects.filter(name="paid-then-cancelled").exists()
    assert jobs.driver.operator.steps(job_id) == []


# -- the drain and stop ------------------------------------------------------------------------


def test_drain_interrupts_uncounted_whatever_the_body_raised(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    def unwinds_badly(run: JobRun[Any]) -> None:
        probe.enter(run)
        run.signal.wait(WAIT)
        raise ValueError("the app's own error for a child the shutdown killed")

    handle = declare("drained", unwinds_badly)
    job_id = handle.enqueue({"k": 1}).id
    worker = make_worker()
    worker.run_once()
    (run,) = probe.started(job_id)

    assert worker.drain() is True
    assert code(run) == "X_DRAINING"
    (execution,) = worker.executions
    assert (execution.outcome, execution.code) == ("interrupted", "X_DRAINING")
    record = row(jobs, job_id)
    assert (record.state, record.attempts) == ("ready", 0)
    assert record.run_at_ms <= jobs.clock.now_ms()  # claimable at once by the replacement
    assert worker.state == "stopped"
    assert worker.stats.interrupted == 1 and worker.stats.retried == 0
    assert worker.run_once() == 0  # a stopped worker claims nothing


def test_drain_deadline_abandons_a_body_that_ignores_the_signal(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    stubborn = declare("stubborn", probe.hold)
    job_id = stubborn.enqueue({"k": 1}).id
    worker = make_worker()
    worker.run_once()
    (run,) = probe.started(job_id)

    assert worker.drain(deadline_ms=50) is False
    assert run.signal.aborted
    abandoned = events(caplog, "jobs.worker.drain-abandoned")
    assert len(abandoned) == 1 and abandoned[0].jobs["job_ids"] == [job_id]
    assert worker.state == "stopped" and worker.stats.abandoned == 1
    assert row(jobs, job_id).state == "running"  # its lease lapses; the queue delivers it again

    probe.release(job_id)
    eventually(lambda: worker.executions, timeout=WAIT)


def test_manual_stop_aborts_nothing_and_waits(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    blocked = declare("stopped_politely", probe.hold)
    job_id = blocked.enqueue({"k": 1}).id
    worker = make_worker()
    worker.run_once()
    (run,) = probe.started(job_id)

    stopper = threading.Thread(target=closing_connections(worker.stop), name="test-stop")
    stopper.start()
    eventually(lambda: worker.state == "draining", timeout=WAIT)
    stopper.join(0.02)
    assert stopper.is_alive()  # waiting for the job, with no budget
    assert not run.signal.aborted
    assert worker.run_once() == 0  # but no longer claiming

    probe.release(job_id)
    stopper.join(WAIT)
    assert not stopper.is_alive()
    assert worker.state == "stopped"
    assert worker.executions[0].outcome == "completed"
    assert row(jobs, job_id).state == "done"


# -- limits ------------------------------------------------------------------------------------


def by_org(i: dict[str, Any]) -> str:
    return str(i["org"])


def test_per_tenant_limit_sheds_without_burning_an_attempt(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    handle = declare("per_tenant", probe.hold, tenant=by_org)
    first, second, other = in_order(
        jobs, handle, [{"k": 1, "org": "org-a"}, {"k": 2, "org": "org-a"}, {"k": 3, "org": "org-b"}]
    )
    worker = make_worker(concurrency=3, limits=LimitConfig(per_tenant=1))

    assert worker.run_once() == 2
    probe.started(first, other)
    assert worker.stats.shed == 1
    shed = row(jobs, second)
    assert (shed.state, shed.attempts) == ("ready", 0)
    assert second not in probe.runs

    probe.release(first)
    eventually(lambda: len(worker.in_flight()) == 1, timeout=WAIT)
    jobs.clock.advance(worker.poll_interval_ms)
    assert worker.run_once() == 1
    (run,) = probe.started(second)
    assert run.attempt == 1  # the shed attempt was handed back, not spent


def test_global_limit_sheds(jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]) -> None:
    handle = declare("global_cap", probe.hold, tenant=by_org)
    ids = in_order(jobs, handle, [{"k": n, "org": f"org-{n}"} for n in range(2)])
    worker = make_worker(limits=LimitConfig(global_=1))

    assert worker.run_once() == 1
    assert worker.stats.shed == 1
    assert [row(jobs, i).attempts for i in ids] == [1, 0]


def test_per_queue_limit_sheds_only_its_queue(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    handle = declare("queue_cap", probe.hold)
    capped = [handle.enqueue({"k": f"c{n}"}, queue="capped").id for n in range(2)]
    free = [handle.enqueue({"k": f"f{n}"}, queue="free").id for n in range(2)]
    worker = make_worker(queues=["capped", "free"], limits=LimitConfig(per_queue={"capped": 1}))

    assert worker.run_once() == 3
    assert worker.stats.shed == 1
    assert sorted(row(jobs, i).state for i in capped) == ["ready", "running"]
    assert [row(jobs, i).state for i in free] == ["running", "running"]


def test_rate_per_tenant_sheds_until_the_window_passes(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    def quick(run: JobRun[Any]) -> None:
        probe.enter(run)

    handle = declare("rated", quick, tenant=by_org)
    first, second = in_order(jobs, handle, [{"k": 1, "org": "org-a"}, {"k": 2, "org": "org-a"}])
    worker = make_worker(limits=LimitConfig(rate_per_tenant=(1, "1s")))

    assert worker.run_once() == 1
    assert worker.wait_idle(WAIT)
    assert row(jobs, first).state == "done"
    assert (row(jobs, second).state, row(jobs, second).attempts) == ("ready", 0)

    jobs.clock.advance(worker.poll_interval_ms)  # due again, still inside the 1 s window
    assert worker.run_once() == 0
    assert worker.stats.shed == 2

    jobs.clock.advance(1_000 - worker.poll_interval_ms)
    assert worker.run_once() == 1
    assert worker.wait_idle(WAIT)
    assert row(jobs, second).state == "done"
    assert (row(jobs, second).attempts, worker.stats.shed) == (1, 2)


@memory_only  # the limiter alone, on the frozen clock: no driver is involved
def test_limiter_state_stays_as_small_as_the_work(jobs: AnyJobsEnv) -> None:
    """A process that has seen thousands of orgs keeps counters and rate windows for the active ones only
    (read through the limiter's private maps: the size IS the property)."""
    limiter = Limiter(LimitConfig(per_tenant=1, per_queue={QUEUE: 10_000}, rate_per_tenant=(1, "1s")), jobs.clock)
    for n in range(3_000):
        assert limiter.admit(queue=QUEUE, tenant_id=f"org-{n}")
        limiter.release(queue=QUEUE, tenant_id=f"org-{n}")
    # Private, and the only way: what is asserted is the memory the limiter keeps, which nothing public shows.
    assert limiter._tenant == {} and limiter._queue == {}
    assert len(limiter._starts) == 3_000  # every window still live: all kept

    jobs.clock.advance(1_000)  # every one of those windows passed: the next sweep forgets them
    for n in range(3_000, 4_200):
        assert limiter.admit(queue=QUEUE, tenant_id=f"org-{n}")
        limiter.release(queue=QUEUE, tenant_id=f"org-{n}")
    assert len(limiter._starts) <= 1_200
    assert "org-0" not in limiter._starts
    assert not limiter.admit(queue=QUEUE, tenant_id="org-4199")  # a live window is never forgotten


# -- one run per key ---------------------------------------------------------------------------


def by_account(i: dict[str, Any]) -> str:
    return str(i["account"])


def test_busy_key_waits_uncounted_then_runs(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    handle = declare("keyed_wait", probe.hold, concurrency=Concurrency(key=by_account, limit=1))
    worker = make_worker()
    first = handle.enqueue({"k": 1, "account": "acct-1"}).id
    assert worker.run_once() == 1
    probe.started(first)
    key = job_lease_key("keyed_wait", "acct-1")
    assert len(jobs.driver.leases.holders(key)) == 1

    second = handle.enqueue({"k": 2, "account": "acct-1"}).id
    assert worker.run_once() == 1
    eventually(lambda: len(worker.executions) == 1, timeout=WAIT)
    handed_back = worker.executions[0]
    assert (handed_back.job_id, handed_back.outcome) == (second, None)
    record = row(jobs, second)
    assert (record.state, record.attempts) == ("ready", 0)
    assert second not in probe.runs  # the body never started

    probe.release(first)
    eventually(lambda: not worker.in_flight(), timeout=WAIT)
    assert jobs.driver.leases.holders(key) == []
    jobs.clock.advance(250)
    assert worker.run_once() == 1
    (run,) = probe.started(second)
    assert run.attempt == 1
    probe.release(second)
    assert worker.wait_idle(WAIT)
    assert row(jobs, second).state == "done"


def test_busy_key_under_fail_refuses(jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]) -> None:
    told: list[Settled] = []
    handle = declare(
        "keyed_fail",
        probe.hold,
        concurrency=Concurrency(key=by_account, limit=1, when_busy="fail"),
        on_settled=told.append,
    )
    worker = make_worker()
    first = handle.enqueue({"k": 1, "account": "acct-1"}).id
    worker.run_once()
    probe.started(first)

    second = handle.enqueue({"k": 2, "account": "acct-1"}).id
    worker.run_once()
    eventually(lambda: len(worker.executions) == 1, timeout=WAIT)
    record = row(jobs, second)
    assert (record.state, record.attempts, record.last_code) == ("failed", 0, "X_JOB_KEY_BUSY")
    assert record.last_error is not None and record.last_error.startswith("X_JOB_KEY_BUSY")
    assert second not in probe.runs
    assert [(s.job_id, s.outcome, s.code) for s in told] == [(second, "refused", "X_JOB_KEY_BUSY")]
    assert worker.stats.refused == 1 and worker.stats.retried == 0

    other_key = handle.enqueue({"k": 3, "account": "acct-2"}).id  # another key is not busy
    worker.run_once()
    probe.started(other_key)


def test_plain_concurrency_cap_serialises(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    handle = declare("plain_cap", probe.hold, concurrency=1)
    worker = make_worker()
    first = handle.enqueue({"k": 1}).id
    worker.run_once()
    probe.started(first)
    assert len(jobs.driver.leases.holders("job:plain_cap")) == 1

    second = handle.enqueue({"k": 2}).id
    worker.run_once()
    eventually(lambda: len(worker.executions) == 1, timeout=WAIT)
    assert (row(jobs, second).state, row(jobs, second).attempts) == ("ready", 0)

    probe.release(first)
    eventually(lambda: not worker.in_flight(), timeout=WAIT)
    jobs.clock.advance(250)
    worker.run_once()
    probe.started(second)


# -- a fair queue's claim-ahead buffer ---------------------------------------------------------


@pytest.mark.parametrize(
    ("fair", "expected"),
    [
        (True, ["org-a", "org-b", "org-a", "org-a", "org-a"]),  # in turn: org B's one job starts second
        (False, ["org-a", "org-a", "org-a", "org-a", "org-b"]),  # in claim order: org B's, enqueued last, last
    ],
)
def test_a_fair_queues_buffered_jobs_start_in_their_orgs_turn(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker], fair: bool, expected: list[str]
) -> None:
    """FAIR_QUEUES: jobs a worker claimed ahead wait for a slot in their orgs' turn, as the claim hands them out
    — org B's one job, claimed beside four of org A's enqueued before it, starts second, not fifth."""
    if fair:
        jobs.driver.fair_queues = frozenset({QUEUE})
    started: list[str] = []
    gate = threading.Event()

    def body(run: JobRun[Any]) -> None:
        started.append(run.input["org"])
        gate.wait(WAIT)

    handle = declare("buffered", body, tenant=by_org)
    in_order(jobs, handle, [*({"k": n, "org": "org-a"} for n in range(4)), {"k": 99, "org": "org-b"}])
    worker = make_worker(concurrency=1, claim_ahead=4)
    assert worker.run_once() == 5  # one slot and four ahead: every row, org B's last in claim order
    eventually(lambda: started == ["org-a"], timeout=WAIT)
    gate.set()
    eventually(lambda: len(started) == 5, timeout=WAIT)
    assert started == expected


# -- at most N running per org in a queue, across the fleet ------------------------------------


def test_an_org_at_its_fleet_cap_waits_uncounted_while_another_org_runs(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    """LIMITS["FLEET_PER_TENANT"]: two workers over one store (as two processes share one database) run at
    most one job of org A in the queue at once; org B is not held back by it."""
    handle = declare("per_org", probe.hold, tenant=by_org)
    capped = LimitConfig(fleet_per_tenant={QUEUE: 1})
    one, two = make_worker(limits=capped), make_worker(limits=capped)
    first = handle.enqueue({"k": 1, "org": "org-a"}).id
    assert one.run_once() == 1
    probe.started(first)
    assert jobs.driver.leases.holders(tenant_lease_key(QUEUE, "org-a")) == [f"{first}:{one.in_flight()[0].job.claim}"]

    second = handle.enqueue({"k": 2, "org": "org-a"}).id
    other = handle.enqueue({"k": 3, "org": "org-b"}).id
    assert two.run_once() == 2
    probe.started(other)  # org B runs beside org A's one
    eventually(lambda: any(e.job_id == second for e in two.executions), timeout=WAIT)
    assert (row(jobs, second).state, row(jobs, second).attempts) == ("ready", 0)  # handed back, uncounted
    assert second not in probe.runs

    probe.release(first)
    eventually(lambda: not one.in_flight(), timeout=WAIT)
    assert jobs.driver.leases.holders(tenant_lease_key(QUEUE, "org-a")) == []
    jobs.clock.advance(250)
    assert two.run_once() == 1
    (run,) = probe.started(second)
    assert run.attempt == 1
    probe.release_all()
    assert one.wait_idle(WAIT) and two.wait_idle(WAIT)
    assert {row(jobs, i).state for i in (first, second, other)} == {"done"}


def test_a_run_waiting_for_its_orgs_slot_holds_no_key_of_its_own(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    """All or none: a run whose org is at its cap gives back the job's concurrency key it took."""
    handle = declare("per_org_keyed", probe.hold, tenant=by_org, concurrency=Concurrency(key=by_account, limit=2))
    worker = make_worker(limits=LimitConfig(fleet_per_tenant={QUEUE: 1}))
    first = handle.enqueue({"k": 1, "org": "org-a", "account": "acct-1"}).id
    worker.run_once()
    probe.started(first)
    second = handle.enqueue({"k": 2, "org": "org-a", "account": "acct-1"}).id
    worker.run_once()
    eventually(lambda: any(e.job_id == second for e in worker.executions), timeout=WAIT)
    assert len(jobs.driver.leases.holders(job_lease_key("per_org_keyed", "acct-1"))) == 1  # the first run's only
    probe.release_all()


def test_fleet_per_tenant_caps_are_refused_unless_whole_numbers() -> None:
    with pytest.raises(UltimateError) as refused:
        LimitConfig.from_settings({"FLEET_PER_TENANT": {"payments": 0}})
    assert "fleet_per_tenant['payments']" in refused.value.message
    with pytest.raises(UltimateError):
        LimitConfig.from_settings({"FLEET_PER_TENANT": ["payments"]})


class NoRateStore(Delegating):
    """A driver that keeps no rate schedules."""

    @property
    def rates(self) -> Any:
        return None


def test_start_refuses_a_rate_limit_or_a_fleet_cap_the_driver_cannot_keep(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker]
) -> None:
    declare("metered_nowhere", lambda run: None, rate_limit="10/s")
    worker = make_worker(driver=NoRateStore(jobs.driver), start=False)
    with pytest.raises(UltimateError) as refused:
        worker.start(loop=False)
    assert refused.value.code == "X_JOB_RATE_LIMIT_UNENFORCEABLE" and "metered_nowhere" in refused.value.meta["jobs"]
    registry.unregister("metered_nowhere")
    capped = make_worker(driver=NoLeaseStore(jobs.driver), start=False, limits=LimitConfig(fleet_per_tenant={QUEUE: 1}))
    with pytest.raises(UltimateError) as refused:
        capped.start(loop=False)
    assert refused.value.code == "X_JOB_CONCURRENCY_UNENFORCEABLE" and "FLEET_PER_TENANT" in refused.value.message


def test_start_refuses_concurrency_on_a_driver_with_no_lease_store(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker]
) -> None:
    declare("capped_nowhere", lambda run: None, concurrency=Concurrency(key=by_account, limit=2))
    worker = make_worker(driver=NoLeaseStore(jobs.driver), start=False)
    with pytest.raises(UltimateError) as refused:
        worker.start(loop=False)
    assert refused.value.code == "X_JOB_CONCURRENCY_UNENFORCEABLE"
    assert "capped_nowhere" in refused.value.meta["jobs"]
    assert worker.state == "idle"

    declaring = [h for h in registry.registered("job") if isinstance(h, JobHandle) and h.concurrency is not None]
    assert "capped_nowhere" in {h.name for h in declaring}
    for handle in declaring:  # with no declaration anywhere the same driver boots
        registry.unregister(handle.name)
    try:
        plain = make_worker(driver=NoLeaseStore(jobs.driver), start=False)
        plain.start(loop=False)
        assert plain.state == "running"
    finally:
        for handle in declaring:
            registry.register(handle)


def test_a_stolen_slot_aborts_the_run(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")

    def waits_on_signal(run: JobRun[Any]) -> None:
        probe.enter(run)
        run.signal.wait(WAIT)
        run.signal.throw_if_aborted()

    handle = declare("slot_thief", waits_on_signal, concurrency=Concurrency(key=by_account, limit=1))
    job_id = handle.enqueue({"k": 1, "account": "acct-1"}).id
    worker = make_worker()
    worker.run_once()
    (run,) = probe.started(job_id)

    jobs.clock.advance(HEARTBEAT_MS)  # a healthy slot renews quietly
    assert not run.signal.aborted and not events(caplog, "jobs.worker.slot-lost")

    leases = jobs.driver.leases
    key = job_lease_key("slot_thief", "acct-1")
    (holder,) = leases.holders(key)
    leases.release(key, holder)
    assert leases.acquire(key, "another-worker", limit=1, ttl_ms=30_000)

    jobs.clock.advance(HEARTBEAT_MS)
    assert code(run) == "X_JOB_SLOT_LOST"
    lost = events(caplog, "jobs.worker.slot-lost")
    assert len(lost) == 1 and lost[0].levelno == logging.ERROR
    assert lost[0].jobs["key"] == key and lost[0].jobs["job_id"] == job_id
    assert worker.wait_idle(WAIT)
    assert leases.holders(key) == ["another-worker"]  # the run's exit released nothing it no longer held


def test_a_handed_back_row_gets_a_pass_when_due_and_the_timer_is_forgotten(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker]
) -> None:
    def fails(run: JobRun[Any]) -> None:
        raise RuntimeError("try again")

    handle = declare("handed_back", fails, retry={"attempts": 5, "delay": "2s", "jitter": False})
    worker = make_worker(concurrency=3)
    for n in range(3):
        handle.enqueue({"k": n})
    assert worker.run_once() == 3
    assert worker.wait_idle(WAIT)
    assert [e.outcome for e in worker.executions] == ["retried"] * 3
    # Private, and the only way with run_once() driving passes: the armed timers and the kick they set
    # are read where the loop would consume them (the loop itself waits on a real Event).
    assert len(worker._handbacks) == 3  # one kick armed per row coming due inside a minute
    worker._wake.clear()

    jobs.clock.advance(2_000)
    assert worker._wake.is_set()  # the retry's due time asked for a pass
    assert worker._handbacks == set()  # and fired timers are not kept
    assert worker.run_once() == 3


# -- the operator surface ----------------------------------------------------------------------


def test_workers_lists_this_worker_while_it_runs(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    blocked = declare("registry_row", probe.hold)
    job_id = blocked.enqueue({"k": 1}).id
    worker = make_worker(concurrency=3)

    (info,) = jobs.driver.operator.workers()
    assert (info.id, info.host, info.queues, info.slots) == (worker.worker_id, worker.host, (QUEUE,), 3)
    assert info.in_flight == () and info.started_at_ms == jobs.clock.now_ms()

    worker.run_once()
    probe.started(job_id)
    jobs.clock.advance(HEARTBEAT_MS)
    worker.run_once()  # a claim pass a heartbeat interval after the last write carries the registry row
    (info,) = jobs.driver.operator.workers()
    assert info.in_flight == (job_id,)
    assert info.heartbeat_at_ms == jobs.clock.now_ms()

    # with no claim pass (every slot busy) the heartbeat writes it, once 1.5 intervals have passed
    written = info.heartbeat_at_ms
    jobs.clock.advance(HEARTBEAT_MS)
    assert jobs.driver.operator.workers()[0].heartbeat_at_ms == written
    jobs.clock.advance(HEARTBEAT_MS)
    assert jobs.driver.operator.workers()[0].heartbeat_at_ms == jobs.clock.now_ms()

    probe.release(job_id)
    worker.stop()
    assert jobs.driver.operator.workers() == []


def test_progress_is_throttled_and_the_last_value_lands_before_the_settle(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    writes: list[Progress] = []
    second_half = threading.Event()

    class CountingDriver(Delegating):
        def record_progress(self, job_id: str, ref: Any, progress: Progress) -> bool:
            writes.append(progress)
            landed: bool = self.inner.record_progress(job_id, ref, progress)
            return landed

    def reports(run: JobRun[Any]) -> None:
        for done in range(50):
            run.progress(done, 100)
        probe.enter(run)
        second_half.wait(WAIT)
        for done in range(50, 100):
            run.progress(done, 100, note="half way" if done < 99 else "last")

    handle = declare("reports_progress", reports)
    job_id = handle.enqueue({"k": 1}).id
    worker = make_worker(driver=CountingDriver(jobs.driver))
    worker.run_once()
    probe.started(job_id)
    assert [p.done for p in writes] == [0]  # fifty calls at one instant: one write
    assert row(jobs, job_id).progress == writes[0]

    jobs.clock.advance(1_000)
    second_half.set()
    assert worker.wait_idle(WAIT)
    assert [p.done for p in writes] == [0, 50, 99]  # a second later one more, and the last at the settle
    final = row(jobs, job_id)
    assert final.state == "done"
    assert final.progress is not None and (final.progress.done, final.progress.note) == (99, "last")


def test_log_records_are_the_event_name_with_the_job_facts(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    handle = declare("logged", lambda run: "ok")
    job_id = handle.enqueue({"k": 1}).id
    worker = make_worker()
    worker.run_once()
    assert worker.wait_idle(WAIT)

    (record,) = events(caplog, "jobs.job.completed")
    assert record.getMessage() == "jobs.job.completed" == record.msg
    facts = record.jobs
    assert (facts["job_id"], facts["name"], facts["queue"], facts["attempt"]) == (job_id, "logged", QUEUE, 1)
    started = events(caplog, "jobs.worker.started")
    assert started and started[0].jobs["worker_id"] == worker.worker_id


# -- the claim loop ----------------------------------------------------------------------------


def on_wall_time(jobs: AnyJobsEnv) -> JobDriver:
    """A fresh driver of the test's kind on the system clock (a Postgres or SQLite one reads the same tables)."""
    built: JobDriver = type(jobs.driver)()
    return built


def test_the_loop_picks_up_an_enqueue_through_the_wake(jobs: AnyJobsEnv, probe: Probe) -> None:
    set_job_clock(None)  # real threads and wall time for this one; the fixture restores the frozen clock
    driver = on_wall_time(jobs)
    claims = threading.Semaphore(0)
    done = threading.Event()

    class CountingClaims(Delegating):
        def claim(self, **options: Any) -> Any:
            try:
                return self.inner.claim(**options)
            finally:
                claims.release()

    def quick(run: JobRun[Any]) -> None:
        probe.enter(run)
        done.set()

    handle = declare("woken", quick)
    worker = job_worker(
        driver=CountingClaims(driver),
        context=lambda: None,
        queues=[QUEUE],
        concurrency=2,
        poll_interval="30s",  # after the first (empty) pass the next poll is 30 s away: only the wake is prompt
        idle_poll_max="30s",
    )
    worker.start()
    try:
        assert claims.acquire(timeout=WAIT), "the claim loop never ran its first pass"
        if isinstance(driver, PostgresDriver):  # a LISTEN session hears only what is sent once it listens
            eventually(driver.wake_is_live, timeout=WAIT)
        job_id = driver.enqueue(handle.build_request({"k": 1})).id
        assert done.wait(WAIT), "the enqueue never woke the claim loop"
        eventually(lambda: driver.operator.get(job_id).state == "done", timeout=WAIT)  # type: ignore[union-attr]
        # the row reads done once the settle buffer's ack commits; the worker counts it a moment later
        assert worker.wait_idle(WAIT)
        assert worker.stats.completed == 1
    finally:
        assert worker.drain(deadline_ms=int(WAIT * 1000)) is True
    assert worker.state == "stopped"
    # private, and the only way: the loop's thread has no public handle, and the drain's answer is about the
    # jobs in flight, not the thread
    assert worker._loop_thread is not None and not worker._loop_thread.is_alive()


@postgres_only  # a server connection killed under the loop: the memory driver has none
def test_the_loop_reconnects_after_its_connection_is_killed(jobs: AnyJobsEnv, probe: Probe) -> None:
    set_job_clock(None)  # real threads and wall time, as above
    driver = on_wall_time(jobs)
    assert isinstance(driver, PostgresDriver)
    claims = threading.Semaphore(0)

    class CountingClaims(Delegating):
        def claim(self, **options: Any) -> Any:
            try:
                return self.inner.claim(**options)
            finally:
                claims.release()

    handle = declare("after_restart", probe.enter)
    worker = job_worker(
        driver=CountingClaims(driver),
        context=lambda: None,
        queues=[QUEUE],
        poll_interval="20ms",
        idle_poll_max="50ms",
    )
    worker.start()
    try:
        assert claims.acquire(timeout=WAIT), "the claim loop never ran its first pass"
        eventually(driver.wake_is_live, timeout=WAIT)
        with connection.cursor() as cursor:  # every session but this thread's and the LISTEN one: the loop's
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND application_name <> 'ultimate_jobs.wake'"
            )
            (killed,) = cursor.fetchone()
        assert killed >= 1
        job_id = handle.enqueue({"k": 1}).id
        probe.started(job_id)  # a pass failed on the dead connection; a later one dialled a new one
        eventually(lambda: driver.operator.get(job_id).state == "done", timeout=WAIT)
    finally:
        assert worker.drain(deadline_ms=int(WAIT * 1000)) is True


@postgres_only  # sessions on a server: the memory driver has none
def test_a_drained_worker_leaves_no_session_behind(jobs: AnyJobsEnv, probe: Probe) -> None:
    """The loop, every slot, every wall-clock heartbeat (a thread each) and the LISTEN session close
    what they opened, rather than leave it to the garbage collector."""
    set_job_clock(None)  # real threads and wall time, as above
    driver = type(jobs.driver)(visibility_timeout_ms=600)  # on wall time; a heartbeat thread every 200 ms
    handle = declare("beats_on_threads", probe.hold)
    worker = job_worker(
        driver=driver,
        context=lambda: None,
        queues=[QUEUE],
        poll_interval="20ms",
        idle_poll_max="50ms",
    )
    worker.start()
    try:
        job_id = handle.enqueue({"k": 1}).id
        probe.started(job_id)
        first = row(jobs, job_id).lease_until_ms
        assert first is not None
        eventually(lambda: (row(jobs, job_id).lease_until_ms or 0) >= first + 400, timeout=WAIT)  # two renewals
        probe.release(job_id)
        eventually(lambda: row(jobs, job_id).state == "done", timeout=WAIT)
    finally:
        assert worker.drain(deadline_ms=int(WAIT * 1000)) is True

    def others() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            (count,) = cursor.fetchone()
        return int(count)

    eventually(lambda: others() == 0, timeout=1.0)  # a closed session's backend exits a moment later


# -- claim ahead and the settle buffer ---------------------------------------------------------


class HeldAcks(Delegating):
    """``ack_many`` (every settle the worker's buffer sends) records its batch, then waits — bounded —
    until the test sets ``open``: a settle that is surely still on the wire."""

    def __init__(self, inner: JobDriver) -> None:
        super().__init__(inner)
        self.open = threading.Event()
        self.entered = threading.Semaphore(0)
        self.batches: list[list[str]] = []

    def ack_many(self, acks: Sequence[Any]) -> frozenset[str]:
        self.batches.append([a.job_id for a in acks])
        self.entered.release()
        assert self.open.wait(WAIT), "the test never let the settle go"
        landed: frozenset[str] = self.inner.ack_many(acks)
        return landed


def test_claim_ahead_buffers_claimed_jobs_beyond_the_free_slot_and_renews_their_leases(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    blocked = declare("ahead_buffered", probe.hold)
    ids = in_order(jobs, blocked, [{"k": n} for n in range(5)])
    running, *buffered = ids[:3]
    worker = make_worker(concurrency=1, claim_ahead=2)
    assert worker.claim_ahead == {QUEUE: 2}

    assert worker.run_once() == 3  # one for the free slot, two for the buffer
    probe.started(running)
    assert [row(jobs, i).state for i in ids] == ["running"] * 3 + ["ready"] * 2
    assert [row(jobs, i).attempts for i in ids[:3]] == [1, 1, 1]
    assert sorted(f.job.id for f in worker.in_flight()) == sorted(ids[:3])
    assert not any(i in probe.runs for i in buffered)  # waiting for the slot, not running
    assert worker.run_once() == 0  # slot and buffer full: no claim at all
    assert worker.stats.claimed == 3

    jobs.clock.advance(HEARTBEAT_MS)  # one renewal round covers the buffered leases too
    assert [row(jobs, i).lease_until_ms for i in ids[:3]] == [jobs.clock.now_ms() + 30_000] * 3
    assert not any(i in probe.runs for i in buffered)

    probe.release(running)
    probe.started(buffered[0])  # the freed slot takes the next buffered job...
    assert worker.stats.claimed == 3  # ...with no claim between
    probe.release_all()

    def all_done() -> bool:
        worker.run_once()
        return all(row(jobs, i).state == "done" for i in ids)

    eventually(all_done, timeout=WAIT)
    assert [row(jobs, i).attempts for i in ids] == [1] * 5


def test_drain_hands_the_claim_ahead_buffer_back_uncounted(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    blocked = declare("ahead_drained", probe.hold)
    running, *buffered = in_order(jobs, blocked, [{"k": n} for n in range(3)])
    worker = make_worker(concurrency=1, claim_ahead=2)
    assert worker.run_once() == 3
    (run,) = probe.started(running)

    answers: list[bool] = []
    drainer = threading.Thread(
        target=closing_connections(lambda: answers.append(worker.drain(deadline_ms=int(WAIT * 1000)))),
        name="test-drain",
    )
    drainer.start()
    try:  # the running body keeps its slot (it ignores its signal), so the buffered two cannot start
        eventually(lambda: [row(jobs, i).state for i in buffered] == ["ready", "ready"], timeout=WAIT)
        assert code(run) == "X_DRAINING"
        assert row(jobs, running).state == "running"
    finally:
        probe.release(running)
        drainer.join(WAIT)
    assert not drainer.is_alive() and answers == [True]

    for job_id in buffered:
        record = row(jobs, job_id)
        assert (record.state, record.attempts, record.last_code) == ("ready", 0, "X_DRAINING")
        assert record.run_at_ms is not None and record.run_at_ms <= jobs.clock.now_ms()  # claimable at once
        assert job_id not in probe.runs  # never started
    assert row(jobs, running).state == "done"  # it returned normally after the abort: completed
    assert worker.state == "stopped"
    assert (worker.stats.claimed, worker.stats.interrupted, worker.stats.completed) == (3, 2, 1)
    assert worker.stats.retried == 0 and worker.stats.abandoned == 0


@pytest.mark.parametrize(("body_ms", "claimed"), [(999, 3), (1_000, 1)])
def test_a_queue_whose_attempts_average_50ms_claims_only_its_free_slots(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], body_ms: int, claimed: int
) -> None:
    """The average moves by a twentieth of each attempt: one of 1 000 ms brings it to 50 ms exactly
    (claim ahead stops), one of 999 ms to 49.95 ms (it goes on)."""

    def slow(run: JobRun[Any]) -> None:
        jobs.clock.advance(body_ms)

    slow_job = declare("ahead_slow", slow)
    held = declare("ahead_after_slow", probe.hold)
    worker = make_worker(concurrency=1, claim_ahead=2)
    slow_id = slow_job.enqueue({"k": 1}).id
    assert worker.run_once() == 1
    assert worker.wait_idle(WAIT)
    assert row(jobs, slow_id).state == "done"
    eventually(lambda: worker.stats.completed == 1, timeout=WAIT)
    # the average moves just after the completion is counted, on the thread that finished the flight;
    # private, and the only way to wait for it: the next claim is what shows it, and that is the assertion
    eventually(lambda: worker._avg_ms[QUEUE] == body_ms / 20, timeout=WAIT)
    assert worker.executions[0].duration_ms == body_ms

    ids = in_order(jobs, held, [{"k": n} for n in range(4)])
    assert worker.run_once() == claimed
    probe.started(ids[0])
    assert sum(row(jobs, i).state == "running" for i in ids) == claimed
    assert worker.run_once() == 0


def test_a_slot_takes_its_next_job_while_its_settle_is_buffered_and_wait_idle_waits_for_the_settle(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    quick = declare("settle_deferred", probe.enter)
    first, second = in_order(jobs, quick, [{"k": 1}, {"k": 2}])
    driver = HeldAcks(jobs.driver)
    worker = make_worker(driver=driver, concurrency=1)
    try:
        assert worker.run_once() == 1
        probe.started(first)
        assert driver.entered.acquire(timeout=WAIT)  # first's settle is on the wire, held
        eventually(lambda: worker.run_once() == 1, timeout=WAIT)  # ...and its slot is free already
        probe.started(second)
        assert driver.batches == [[first]]
        assert [row(jobs, i).state for i in (first, second)] == ["running", "running"]
        assert sorted(f.job.id for f in worker.in_flight()) == sorted([first, second])
        assert worker.wait_idle(0.05) is False  # a flight is released only once its settle landed
        assert worker.stats.completed == 0 and not worker.executions
    finally:
        driver.open.set()

    assert worker.wait_idle(WAIT)
    assert [row(jobs, i).state for i in (first, second)] == ["done", "done"]  # landed before wait_idle returned
    assert driver.batches == [[first], [second]]
    executions = sorted(worker.executions, key=lambda e: e.job_id == second)
    assert [(e.job_id, e.outcome, e.completion is not None, e.landed) for e in executions] == [
        (first, "completed", True, True),
        (second, "completed", True, True),
    ]
    eventually(lambda: worker.stats.completed == 2, timeout=WAIT)


def test_the_claim_loop_waits_while_the_unsettled_completions_pass_the_backlog_and_resumes_once_they_land(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    from ultimate_jobs.worker.runtime import SETTLE_BACKLOG_PER_SLOT

    limit = SETTLE_BACKLOG_PER_SLOT  # one slot, no claim-ahead
    quick = declare("settle_backlog", probe.enter)
    ids = in_order(jobs, quick, [{"k": n} for n in range(limit + 3)])
    driver = HeldAcks(jobs.driver)
    worker = make_worker(driver=driver, concurrency=1)
    try:
        for n in range(limit + 1):  # each claim takes the one free slot; its completion waits on the wire
            eventually(lambda: worker.run_once() == 1, timeout=WAIT)
            probe.started(ids[n])
        assert driver.entered.acquire(timeout=WAIT)
        eventually(lambda: worker._settling == limit + 1, timeout=WAIT)
        assert worker.run_once() == 0  # past the backlog: no claim, though the slot is free
        assert [row(jobs, i).state for i in ids[limit + 1 :]] == ["ready", "ready"]
    finally:
        driver.open.set()
    eventually(lambda: worker.run_once() == 1, timeout=WAIT)  # the flush landed: claims go on
    probe.started(ids[limit + 1])
    assert worker.wait_idle(WAIT)


def test_a_settle_held_on_the_wire_past_the_window_keeps_its_lease_and_the_job_runs_once(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    bodies: list[str] = []

    def counted(run: JobRun[Any]) -> None:
        bodies.append(run.job_id)
        probe.enter(run)

    quick = declare("settle_slow", counted)
    (job_id,) = in_order(jobs, quick, [{"k": 1}])
    driver = HeldAcks(jobs.driver)
    worker = make_worker(driver=driver, concurrency=1, visibility_timeout="30s")
    other = make_worker(queues=[QUEUE], concurrency=1, visibility_timeout="30s")
    try:
        assert worker.run_once() == 1
        probe.started(job_id)
        assert driver.entered.acquire(timeout=WAIT)  # the body returned; its settle is on the wire, held
        for _ in range(6):  # 60 s: twice the window, which only renewals can survive
            jobs.clock.advance(HEARTBEAT_MS)
            assert row(jobs, job_id).lease_until_ms == jobs.clock.now_ms() + 30_000
            assert other.run_once() == 0  # nobody may take a row whose body ran and whose settle is coming
        assert row(jobs, job_id).state == "running"
    finally:
        driver.open.set()

    assert worker.wait_idle(WAIT)
    assert row(jobs, job_id).state == "done"
    assert bodies == [job_id]
    assert [(e.outcome, e.landed) for e in worker.executions] == [("completed", True)]
    assert not events(caplog, "jobs.lease.lost") and worker.stats.leases_lost == 0
    jobs.clock.advance(HEARTBEAT_MS)  # the settle landed: nothing renews the done row any more
    assert not events(caplog, "jobs.lease.lost") and not events(caplog, "jobs.heartbeat.failed")


class FailingAcks(Delegating):
    """Every ``ack_many`` raises, as a connection lost mid-flush does."""

    def ack_many(self, acks: Sequence[Any]) -> frozenset[str]:
        raise ConnectionError("the database went away")


def test_a_settle_whose_flush_failed_is_counted_by_nothing_and_its_row_waits_for_its_lease(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    quick = declare("settle_flush_failed", probe.enter)
    (job_id,) = in_order(jobs, quick, [{"k": 1}])
    worker = make_worker(driver=FailingAcks(jobs.driver), concurrency=1)

    assert worker.run_once() == 1
    assert worker.wait_idle(WAIT)
    (execution,) = worker.executions
    assert (execution.outcome, execution.landed, execution.completion is not None) == (None, False, True)
    assert isinstance(execution.error, ConnectionError)
    assert worker.stats.completed == 0  # counted once, by the attempt that lands after the redelivery
    assert row(jobs, job_id).state == "running"  # the lease lapses and the queue delivers it again


def test_a_job_with_on_settled_waits_for_its_settle_and_hears_it_once_after_the_row_is_done(
    jobs: AnyJobsEnv, make_worker: Callable[..., JobWorker]
) -> None:
    told: list[tuple[str, str, str]] = []

    def hear(settled: Settled) -> None:
        told.append((settled.job_id, settled.outcome, row(jobs, settled.job_id).state))

    handle = declare("settle_waited", lambda run: "ok", on_settled=hear)
    first, second = in_order(jobs, handle, [{"k": 1}, {"k": 2}])
    driver = HeldAcks(jobs.driver)
    worker = make_worker(driver=driver, concurrency=1)
    try:
        assert worker.run_once() == 1
        assert driver.entered.acquire(timeout=WAIT)  # the settle is on the wire, held
        assert worker.run_once() == 0  # the slot waits for it: on_settled must hear a landed settle
        assert worker.wait_idle(0.05) is False
        assert told == [] and row(jobs, first).state == "running"
    finally:
        driver.open.set()

    assert worker.wait_idle(WAIT)
    assert told == [(first, "completed", "done")]
    assert worker.run_once() == 1
    assert worker.wait_idle(WAIT)
    assert told == [(first, "completed", "done"), (second, "completed", "done")]
    assert [(e.completion, e.landed) for e in worker.executions] == [(None, True), (None, True)]
    jobs.clock.advance(HEARTBEAT_MS)
    assert worker.run_once() == 0
    assert worker.drain() is True
    assert len(told) == 2  # once each, never again


@postgres_only  # a transaction left open on a Postgres session: the memory driver has none
def test_a_body_that_leaks_an_atomic_block_does_not_break_the_next_job_on_its_slot(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    """A body that enters ``atomic()`` and never leaves it: its writes roll back, its ``on_commit``
    callback never runs, and the next job on the same slot thread queries on a fresh session."""
    committed: list[str] = []
    seen: list[int] = []

    def leaks(run: JobRun[Any]) -> None:
        transaction.atomic().__enter__()  # never exited
        Group.objects.create(name="leaked-write")
        transaction.on_commit(lambda: committed.append("leaked"))
        probe.enter(run)

    def queries(run: JobRun[Any]) -> None:
        seen.append(Group.objects.filter(name="leaked-write").count())
        probe.enter(run)

    leaky = declare("leaks_atomic", leaks)
    after = declare("after_the_leak", queries)
    worker = make_worker(concurrency=1)
    first = leaky.enqueue({"k": 1}).id
    jobs.clock.advance(1)
    second = after.enqueue({"k": 2}).id

    assert worker.run_once() == 1
    probe.started(first)
    eventually(lambda: not worker.in_flight(), timeout=WAIT)
    assert worker.run_once() == 1
    probe.started(second)
    eventually(lambda: row(jobs, second).state == "done", timeout=WAIT)

    assert row(jobs, first).state == "done"
    assert seen == [0]  # the leaked write was never visible, even to the same slot
    assert not Group.objects.filter(name="leaked-write").exists()
    assert committed == []


def test_a_run_waiting_for_its_rate_instant_keeps_its_claim_and_starts_on_it(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    """A run whose reserved instant is beyond the slot's own wait (RATE_HOLD_MS) but within RATE_KEEP_MS is
    not handed back — a hand-back behind an older backlog would be claimed again only after it, its instant
    gone — it leaves its slot (the worker claims the next row into it), keeps its claim and its lease, and is
    back in its slot to start on its instant."""
    started: dict[int, int] = {}

    def metered(run: JobRun[Any]) -> None:
        started[run.input["k"]] = jobs.clock.now_ms()
        probe.enter(run)

    handle = declare("metered_kept", metered, rate_limit="2/s")  # one start every 500 ms
    first, second, third = in_order(jobs, handle, [{"k": n} for n in range(3)])
    worker = make_worker(concurrency=1)
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")

    assert worker.run_once() == 1
    probe.started(first)
    eventually(lambda: not worker.in_flight())
    assert worker.run_once() == 1  # the second takes the next instant, 500 ms away, and leaves its slot
    eventually(lambda: worker.stats.kept == 1)
    assert worker.run_once() == 1  # so the slot takes the third, whose instant is 1 s away: kept too
    eventually(lambda: worker.stats.kept == 2)
    assert [row(jobs, i).state for i in (second, third)] == ["running", "running"]  # still this worker's claims
    assert [r.attempts for r in (row(jobs, second), row(jobs, third))] == [1, 1]
    assert not events(caplog, "jobs.job.rate-limited")  # neither went back to the queue

    jobs.clock.advance(started[0] + 500 - jobs.clock.now_ms() - 100)  # its timer: back in its slot ahead of it
    probe.started(second)
    jobs.clock.advance(max(0, started[0] + 1_000 - jobs.clock.now_ms() - 100))
    probe.started(third)
    assert worker.wait_idle(WAIT)
    assert [started[n] - started[0] for n in (1, 2)] == [500, 1_000]  # each on its instant
    assert [(row(jobs, i).state, row(jobs, i).attempts) for i in (first, second, third)] == [("done", 1)] * 3
    assert worker.stats.claimed == 3  # claimed once each


def test_a_drain_hands_a_kept_run_back_due_just_ahead_of_its_instant(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker]
) -> None:
    """A drain does not wait for a kept run's instant: it goes back to ready, uncounted, due RATE_LEAD_MS before
    the instant it keeps — whichever worker claims it then starts on that reservation."""
    handle = declare("metered_drained", probe.enter, rate_limit="1/s")
    first, second = in_order(jobs, handle, [{"k": 1}, {"k": 2}])
    worker = make_worker(concurrency=1)
    assert worker.run_once() == 1
    probe.started(first)
    eventually(lambda: not worker.in_flight())
    first_at = jobs.clock.now_ms()
    assert worker.run_once() == 1
    eventually(lambda: worker.stats.kept == 1)
    instant = first_at + 1_000

    assert worker.drain(deadline_ms=int(WAIT * 1000))
    back = row(jobs, second)
    assert (back.state, back.attempts) == ("ready", 0)
    assert back.run_at_ms == instant - RATE_LEAD_MS
