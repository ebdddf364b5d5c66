"""What a driver declares is what the library reads, never what a probe finds: the wake flags decide
whether a worker subscribes and whether it asks the wake, the system check refuses a dotted-path driver
that leaves a capability undeclared (or promises a method it lacks), a surface needing a store the
driver declares ``None`` answers its coded error (while the runtime's writes, the driver's own, still land),
and an acker's deferred ack is a declaration too."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.checks import Error
from django.test import override_settings

from tests.conftest import JobsEnv
from ultimate_jobs import AttemptEnv, JobRun, execute_job, job
from ultimate_jobs.apps import check_settings
from ultimate_jobs.contracts.base import BaseDriver, undeclared_capabilities
from ultimate_jobs.contracts.jobs import Ack, Claim, ClaimRef
from ultimate_jobs.contracts.protocol import DECLARED_CAPABILITIES, JobDriver, OperatorStore
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.memory.operator import MemoryOperatorStore
from ultimate_jobs.drivers.postgres.operator import PostgresOperatorStore
from ultimate_jobs.drivers.redis.operator import RedisOperatorStore
from ultimate_jobs.drivers.sqlite.operator import SqliteOperatorStore
from ultimate_jobs.errors import NotImplementedOnDriverError, UltimateError
from ultimate_jobs.operator import inspect_backfills
from ultimate_jobs.worker import IDLE_POLL_CEILING_MS, WOKEN_IDLE_POLL_CEILING_MS, JobWorker, job_worker

UNDECLARED = "ultimate_jobs.X_SETTINGS_DRIVER_UNDECLARED"


class Declaring:
    """The memory driver with some declarations replaced (and members standing in for its methods)."""

    def __init__(self, inner: MemoryDriver, **declared: Any) -> None:
        self.inner = inner
        for name, value in declared.items():
            setattr(self, name, value)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


@pytest.fixture
def workers() -> Iterator[Callable[..., JobWorker]]:
    built: list[JobWorker] = []

    def make(driver: Any, clock: Any) -> JobWorker:
        worker = job_worker(driver=driver, context=lambda: None, queues=["wq"], clock=clock)
        built.append(worker)
        return worker

    yield make
    for worker in built:
        if worker.state != "stopped":
            worker.drain(deadline_ms=5_000)


# -- the wake flags --------------------------------------------------------------------------------


def test_a_worker_subscribes_only_to_a_driver_that_declares_a_wake(
    jobs: JobsEnv, workers: Callable[..., JobWorker]
) -> None:
    asked: list[str] = []

    def subscribe(listener: Callable[[str], None]) -> Callable[[], None]:
        asked.append("subscribe")
        return lambda: asked.append("unsubscribe")

    silent = Declaring(jobs.driver, supports_wake=False, supports_listen=False, subscribe=subscribe)
    workers(silent, jobs.clock).start(loop=False)
    assert asked == []  # declared no wake: the poll alone finds the work
    woken = Declaring(jobs.driver, supports_wake=True, subscribe=subscribe)
    worker = workers(woken, jobs.clock)
    worker.start(loop=False)
    assert asked == ["subscribe"]
    assert worker.drain(deadline_ms=5_000) is True
    assert asked == ["subscribe", "unsubscribe"]


def test_the_wake_is_asked_only_of_a_driver_that_declares_it_crosses_processes(
    jobs: JobsEnv, workers: Callable[..., JobWorker]
) -> None:
    asked: list[bool] = []

    def wake_is_live() -> bool:
        asked.append(True)
        return True

    local = Declaring(jobs.driver, supports_listen=False, wake_is_live=wake_is_live)
    assert workers(local, jobs.clock).idle_ceiling_ms() == IDLE_POLL_CEILING_MS
    assert asked == []
    listening = Declaring(jobs.driver, supports_listen=True, wake_is_live=wake_is_live)
    assert workers(listening, jobs.clock).idle_ceiling_ms() == WOKEN_IDLE_POLL_CEILING_MS
    assert asked == [True]


# -- the system check ------------------------------------------------------------------------------


class HandRolled:
    """A third-party driver declaring every capability: no wake, no optional store."""

    name = "hand-rolled"
    alias = None
    visibility_timeout_ms = 30_000
    fair_queues = frozenset[str]()
    supports_wake = False
    supports_listen = False
    operator = None
    leases = None
    rates = None
    leader = None
    scheduler_state = None
    backfills = None
    async_enqueue = None


class Undeclared:
    """A driver from before the contract declared capabilities: a name, and nothing else."""

    name = "undeclared"


class ListensWithoutAWake(HandRolled):
    supports_listen = True  # and neither supports_wake nor a wake_is_live() to ask


class FlagIsNoBool(HandRolled):
    supports_wake = "yes"  # type: ignore[assignment]


class OnTheBase(BaseDriver):
    """A driver on the base class: it names itself and claims; every capability is the base's default."""

    name = "on-the-base"

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []
        self.acked: list[Ack] = []

    def _claim_checked(self, **ask: Any) -> Claim:
        self.asked.append(ask)
        return Claim()

    def ack_many(self, acks: Any) -> frozenset[str]:
        self.acked.extend(acks)
        return frozenset(a.job_id for a in acks)


class ChecksItself(OnTheBase):
    """A driver with a rule of its own for the system check."""

    name = "checks-itself"

    def check(self) -> list[str]:
        return [*super().check(), "a replica set (this driver needs its primary)"]


def errors_for(factory: str) -> list[Error]:
    with override_settings(ULTIMATE_JOBS={"DRIVER": f"tests.unit.test_capabilities.{factory}"}):
        found = check_settings()
    assert all(isinstance(e, Error) for e in found)
    return found  # type: ignore[return-value]


def test_a_driver_declaring_every_capability_passes_the_check() -> None:
    assert UNDECLARED not in [e.id for e in errors_for("HandRolled")]  # (its leases=None may refuse a job)
    assert undeclared_capabilities(MemoryDriver()) == []


def test_a_driver_on_the_base_class_declares_every_capability_by_its_default() -> None:
    driver = OnTheBase()
    assert undeclared_capabilities(driver) == [] and driver.check() == []
    assert (driver.alias, driver.supports_wake, driver.supports_listen, driver.async_enqueue) == (
        None,
        False,
        False,
        None,
    )
    assert (driver.operator, driver.leases, driver.rates, driver.leader, driver.backfills) == (None,) * 5
    assert driver.fair_queues == frozenset() and driver.visibility_timeout_ms > 0
    assert UNDECLARED not in [e.id for e in errors_for("OnTheBase")]


def test_the_system_check_asks_the_driver_on_the_base_class() -> None:
    (error,) = [e for e in errors_for("ChecksItself") if e.id == UNDECLARED]
    assert "a replica set (this driver needs its primary)" in error.msg


def test_the_base_class_checks_a_claim_and_acks_through_ack_many() -> None:
    driver = OnTheBase()
    with pytest.raises(UltimateError) as caught:
        driver.claim(queues=[], limit=1, worker_id="w")
    assert caught.value.code == "X_JOB_CLAIM_QUEUES_EMPTY" and driver.asked == []
    driver.claim(queues=["q"], limit=3, worker_id="w")
    driver.claim(queues=["q"], limit=3, worker_id="w", visibility_timeout_ms=1_234)
    assert [ask["window_ms"] for ask in driver.asked] == [driver.visibility_timeout_ms, 1_234]
    assert driver.ack("j-1", ClaimRef("w", "c"), duration_ms=5) is True
    assert driver.acked == [Ack("j-1", ClaimRef("w", "c"), 5, None)]


def test_a_driver_leaving_capabilities_undeclared_is_refused_naming_each() -> None:
    (error,) = errors_for("Undeclared")
    assert error.id == UNDECLARED
    for attr in (
        "alias",
        "visibility_timeout_ms",
        "fair_queues",
        "supports_wake",
        "supports_listen",
        "operator",
        "backfills",
        "async_enqueue",
    ):
        assert attr in error.msg
    assert "name (" not in error.msg  # declared
    assert "declare each on the driver class" in error.hint


def test_a_declared_wake_without_its_method_is_refused() -> None:
    (error,) = errors_for("ListensWithoutAWake")
    assert error.id == UNDECLARED
    assert "wake_is_live() (declared by supports_listen = True)" in error.msg
    assert "supports_wake = True" in error.msg


def test_a_flag_that_is_no_bool_is_refused() -> None:
    (error,) = errors_for("FlagIsNoBool")
    assert "supports_wake must be True or False, not 'yes'" in error.msg


# -- a store declared None -------------------------------------------------------------------------


def test_a_driver_declaring_no_ledger_gets_the_coded_refusal(jobs: JobsEnv) -> None:
    bare: Any = Declaring(jobs.driver, backfills=None)
    with pytest.raises(NotImplementedOnDriverError) as refused:
        inspect_backfills(driver=bare)
    assert refused.value.code == "X_NOT_IMPLEMENTED"
    assert refused.value.meta == {"driver": "memory", "capability": "backfills"}


RUNTIME_WRITES = {"record_worker", "remove_worker", "record_progress", "rollup_counters"}


def test_the_runtime_writes_are_the_drivers_own_and_no_operator_store_has_one() -> None:
    assert set(dir(JobDriver)) >= RUNTIME_WRITES
    for store in (OperatorStore, MemoryOperatorStore, PostgresOperatorStore, SqliteOperatorStore, RedisOperatorStore):
        assert not RUNTIME_WRITES & set(dir(store)), store.__name__
    assert ("operator", "the operator's store (reads and operator actions), or None") in DECLARED_CAPABILITIES


def test_a_driver_declaring_no_operator_store_still_keeps_the_worker_registry(
    jobs: JobsEnv, workers: Callable[..., JobWorker]
) -> None:
    bare = Declaring(jobs.driver, operator=None)
    worker = workers(bare, jobs.clock)
    worker.start(loop=False)
    assert [w.id for w in jobs.driver.operator.workers()] == [worker.worker_id]  # written through the driver
    assert worker.drain(deadline_ms=5_000) is True
    assert jobs.driver.operator.workers() == []  # and removed through it at the stop


# -- who settles a completion ---------------------------------------------------------------------


@pytest.mark.parametrize("leave", [False, True])
def test_a_completion_is_left_to_the_runner_only_when_the_runner_asks(jobs: JobsEnv, leave: bool) -> None:
    """The worker asks (``leave_completions``) and acks in batches itself; ``run_jobs`` does not, and the
    attempt acks through the driver before it returns."""

    @job(name="acked", idempotency_key=lambda i: "k", tenant="none")
    def acked(run: JobRun[Any]) -> str:
        return "ok"

    job_id = acked.enqueue({}).id
    [claimed] = jobs.driver.claim(queues=["default"], limit=1, worker_id="w1").jobs
    env = AttemptEnv(driver=jobs.driver, clock=jobs.clock, rng=random.Random(0), leave_completions=leave)
    execution = execute_job(claimed, env)
    state = jobs.driver.operator.get(job_id).state  # type: ignore[union-attr]
    if leave:
        assert execution.completion is not None and execution.completion.job_id == job_id
        assert state == "running"  # nobody acked: the runner's batch will
        assert jobs.driver.ack_many([execution.completion]) == {job_id}
        assert jobs.driver.operator.get(job_id).state == "done"  # type: ignore[union-attr]
    else:
        assert execution.completion is None and execution.landed is True and state == "done"
