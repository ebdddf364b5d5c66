"""The driver conformance suite: one set of scenarios every driver's tests subclass.

>>> class TestMemoryDriver(DriverConformance):
...     @pytest.fixture
...     def make_driver(self):
...         return lambda clock: MemoryDriver(clock=clock)

The suite builds a fresh driver per test from ``make_driver(clock)`` over a :class:`FrozenClock`
(the ``clock`` fixture), and speaks only the public protocol of :mod:`ultimate_jobs.contracts.protocol`.
A test of an optional capability asks for the ``operator_store``, ``leases``, ``leader_store``,
``scheduler_state`` or ``backfills`` fixture, which skips, with its reason, only when the driver declares
that capability ``None``. Each test expects an empty store: a driver over a database truncates (or rolls
back) in its ``make_driver`` fixture.
See ``docs/conformance.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from ..contracts.protocol import BackfillStore, JobDriver, LeaderStore, LeaseStore, OperatorStore, SchedulerStore
from .clock import FrozenClock
from .conformance_async import AsyncJobContract
from .conformance_backfills import BackfillContract
from .conformance_exits import BodyExitContract
from .conformance_fairness import FairnessContract
from .conformance_operator import OperatorContract
from .conformance_ordering import OrderingContract
from .conformance_queue import QueueContract
from .conformance_rates import FleetLimitContract, RateContract
from .conformance_retention import RetentionContract
from .conformance_scheduler import SchedulerContract
from .conformance_support import (
    JOB,
    QUEUE,
    VT,
    StateWriter,
    claim,
    claim_one,
    claimed_ids,
    declared,
    enqueue_finished,
    finish,
    fixed_id,
    new_id,
    raises_code,
    record,
    request,
    requests,
    settle_done,
)

__all__ = [
    "JOB",
    "QUEUE",
    "VT",
    "AsyncJobContract",
    "BackfillContract",
    "DriverConformance",
    "DriverFactory",
    "FairnessContract",
    "FleetLimitContract",
    "LeaseContract",
    "OperatorContract",
    "QueueContract",
    "RateContract",
    "RetentionContract",
    "SchedulerContract",
    "StateWriter",
    "claim",
    "claim_one",
    "claimed_ids",
    "declared",
    "enqueue_finished",
    "finish",
    "fixed_id",
    "new_id",
    "raises_code",
    "record",
    "request",
    "requests",
    "settle_done",
]

DriverFactory = Callable[[FrozenClock], JobDriver]
"""What ``make_driver`` answers: build a driver over the test's frozen clock."""

TTL = 1_000
KEY = "job:conformance.capped"


class LeaseContract:
    """``driver.leases``: fleet slots, at most ``limit`` holders per key, each lapsing on its own TTL."""

    def test_lease_acquire_up_to_limit(self, leases: LeaseStore) -> None:
        assert leases.acquire(KEY, "h1", limit=2, ttl_ms=TTL) is True
        assert leases.acquire(KEY, "h2", limit=2, ttl_ms=TTL) is True
        assert leases.acquire(KEY, "h3", limit=2, ttl_ms=TTL) is False
        assert leases.holders(KEY) == ["h1", "h2"]

    def test_lease_acquire_is_idempotent_per_holder(self, leases: LeaseStore) -> None:
        assert leases.acquire(KEY, "h1", limit=1, ttl_ms=TTL)
        assert leases.acquire(KEY, "h1", limit=1, ttl_ms=TTL)
        assert leases.holders(KEY) == ["h1"]
        assert leases.acquire(KEY, "h2", limit=1, ttl_ms=TTL) is False

    def test_lease_holders_are_in_slot_order(self, leases: LeaseStore, clock: FrozenClock) -> None:
        for holder in ("h3", "h1", "h2"):
            assert leases.acquire(KEY, holder, limit=3, ttl_ms=TTL)
            clock.advance(1)
        assert leases.holders(KEY) == ["h3", "h1", "h2"]
        assert leases.holders("job:conformance.nobody") == []

    def test_lease_keys_are_independent(self, leases: LeaseStore) -> None:
        assert leases.acquire(KEY, "h1", limit=1, ttl_ms=TTL)
        assert leases.acquire("job-key:conformance.capped:acct-1", "h2", limit=1, ttl_ms=TTL)
        assert leases.holders(KEY) == ["h1"]

    def test_lease_renew_extends_only_a_held_slot(self, leases: LeaseStore, clock: FrozenClock) -> None:
        assert leases.acquire(KEY, "h1", limit=1, ttl_ms=TTL)
        clock.advance(TTL - 1)
        assert leases.renew(KEY, "h1", ttl_ms=TTL) is True
        clock.advance(TTL - 1)
        assert leases.holders(KEY) == ["h1"]
        assert leases.renew(KEY, "h2", ttl_ms=TTL) is False
        clock.advance(1)
        assert leases.renew(KEY, "h1", ttl_ms=TTL) is False

    def test_lease_release_frees_the_slot(self, leases: LeaseStore) -> None:
        assert leases.acquire(KEY, "h1", limit=1, ttl_ms=TTL)
        leases.release(KEY, "h2")  # holds nothing: a no-op
        assert leases.holders(KEY) == ["h1"]
        leases.release(KEY, "h1")
        leases.release(KEY, "h1")
        assert leases.holders(KEY) == []
        assert leases.acquire(KEY, "h2", limit=1, ttl_ms=TTL) is True

    def test_lease_ttl_lapse_frees_the_slot_with_no_cleanup_call(self, leases: LeaseStore, clock: FrozenClock) -> None:
        assert leases.acquire(KEY, "h1", limit=1, ttl_ms=TTL)
        clock.advance(TTL - 1)
        assert leases.acquire(KEY, "h2", limit=1, ttl_ms=TTL) is False
        clock.advance(1)
        assert leases.holders(KEY) == []
        assert leases.acquire(KEY, "h2", limit=1, ttl_ms=TTL) is True
        assert leases.holders(KEY) == ["h2"]


class DriverConformance(
    QueueContract,
    FairnessContract,
    OperatorContract,
    OrderingContract,
    LeaseContract,
    RateContract,
    FleetLimitContract,
    SchedulerContract,
    RetentionContract,
    BackfillContract,
    AsyncJobContract,
    BodyExitContract,
):
    """Subclass it in a ``Test*`` class and provide ``make_driver``; every scenario then runs on your driver.

    A scenario reads what the driver declares — its capabilities (a store declared ``None`` skips the
    scenarios needing it) and its ``visibility_timeout_ms`` — never a default of its own.
    """

    @pytest.fixture
    def clock(self) -> FrozenClock:
        """The frozen clock the driver reads; tests advance it, never sleep."""
        return FrozenClock()

    @pytest.fixture
    def make_driver(self) -> DriverFactory:
        """Override in the subclass: answer a function building the driver under test over a clock."""
        raise NotImplementedError(
            f"{type(self).__name__} must define a `make_driver` fixture answering "
            "`lambda clock: YourDriver(clock=clock)`"
        )

    @pytest.fixture
    def write_state(self) -> StateWriter:
        """Override in the subclass to run the unknown-state scenario: answer a function writing a raw
        state on a job's row in your store (``tests/*/test_*_driver.py`` show one per driver)."""
        pytest.skip(f"{type(self).__name__} gives no `write_state` fixture (a raw write of a job's state)")

    @pytest.fixture
    def driver(self, make_driver: DriverFactory, clock: FrozenClock) -> Iterator[JobDriver]:
        """A fresh driver per test, closed afterwards."""
        built = make_driver(clock)
        try:
            yield built
        finally:
            built.close()

    @pytest.fixture
    def operator_store(self, driver: JobDriver) -> OperatorStore:
        """``driver.operator``; the test skips only when the driver declares it ``None``."""
        return declared(driver, driver.operator, "operator", "no operator surface")

    @pytest.fixture
    def leases(self, driver: JobDriver) -> LeaseStore:
        """``driver.leases``; the test skips only when the driver declares it ``None``."""
        return declared(driver, driver.leases, "leases", "no fleet lease store")

    @pytest.fixture
    def leader_store(self, driver: JobDriver) -> LeaderStore:
        """``driver.leader``; the test skips only when the driver declares it ``None``."""
        return declared(driver, driver.leader, "leader", "no leader lease store")

    @pytest.fixture
    def scheduler_state(self, driver: JobDriver) -> SchedulerStore:
        """``driver.scheduler_state``; the test skips only when the driver declares it ``None``."""
        return declared(driver, driver.scheduler_state, "scheduler_state", "no scheduler storage")

    @pytest.fixture
    def backfills(self, driver: JobDriver) -> BackfillStore:
        """``driver.backfills``; the test skips only when the driver declares it ``None``."""
        return declared(driver, driver.backfills, "backfills", "no backfill ledger")
