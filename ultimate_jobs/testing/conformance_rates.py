"""The fleet limits of the conformance suite: ``driver.rates`` (the schedule of starts per rate key), and what
the executor builds on the driver — a rate-limited run handed back to its reserved instant, an org at its
``FLEET_PER_TENANT`` cap handed back — run on the suite's driver.

A mixin of :class:`~ultimate_jobs.testing.conformance.DriverConformance`; its ``rates`` fixture skips, saying
so, on a driver that declares ``rates = None``. The rules (the one decision every store makes,
:func:`ultimate_jobs.drivers.rates.decide`): one start per interval per key; a take that finds the key busy
reserves the next free instant for its holder and answers the wait; back at that instant (within one
interval) the holder starts on its reservation without taking another; back later, it takes anew.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from ..contracts.protocol import JobDriver, OperatorStore, RateStore
from ..core.declare import job
from ..core.definition import JobHandle
from ..core.execute import AttemptEnv, execute_job
from ..core.rates import RATE_LEAD_MS
from ..core.run import JobRun
from .clock import FrozenClock
from .conformance_support import QUEUE, claim, declared, record
from .django import installed_jobs

STEP = 100  # the interval every scenario takes at (ms): ten starts a second


class RateContract:
    """Rate schedules across the fleet (``driver.rates``)."""

    @pytest.fixture
    def rates(self, driver: JobDriver) -> RateStore:
        """``driver.rates``; the test skips only when the driver declares it ``None``."""
        return declared(driver, driver.rates, "rates", "no rate schedules")

    def test_the_first_take_of_a_key_starts_and_the_next_waits_one_interval(
        self, rates: RateStore, clock: FrozenClock
    ) -> None:
        now = clock.now_ms()
        assert rates.take("api:org-a", "job-1", interval_ms=STEP, now_ms=now) == 0
        assert rates.take("api:org-a", "job-2", interval_ms=STEP, now_ms=now) == STEP
        assert rates.take("api:org-a", "job-3", interval_ms=STEP, now_ms=now) == 2 * STEP  # each busy take reserves
        assert rates.take("api:org-b", "job-4", interval_ms=STEP, now_ms=now) == 0  # keys are independent

    def test_a_holder_back_at_its_reserved_instant_starts_on_it(self, rates: RateStore, clock: FrozenClock) -> None:
        now = clock.now_ms()
        rates.take("api", "job-1", interval_ms=STEP, now_ms=now)
        assert rates.take("api", "job-2", interval_ms=STEP, now_ms=now) == STEP
        assert rates.take("api", "job-2", interval_ms=STEP, now_ms=now + STEP // 2) == STEP // 2  # early: still waits
        assert rates.take("api", "job-2", interval_ms=STEP, now_ms=now + STEP) == 0  # its instant: no second take
        assert rates.take("api", "job-3", interval_ms=STEP, now_ms=now + STEP) == STEP  # the schedule moved on once

    def test_a_holder_back_after_its_interval_takes_anew(self, rates: RateStore, clock: FrozenClock) -> None:
        now = clock.now_ms()
        rates.take("api", "job-1", interval_ms=STEP, now_ms=now)
        assert rates.take("api", "job-2", interval_ms=STEP, now_ms=now) == STEP  # reserved: now + STEP
        rates.take("api", "job-3", interval_ms=STEP, now_ms=now)  # reserved: now + 2I
        # job-2 comes back far too late: its reservation is stale, and starting on it could bunch starts
        assert rates.take("api", "job-2", interval_ms=STEP, now_ms=now + 3 * STEP) == 0  # the key is free by then
        assert rates.take("api", "job-4", interval_ms=STEP, now_ms=now + 3 * STEP) == STEP

    @pytest.mark.parametrize("near_ms", [0, 2 * STEP])
    def test_no_window_of_one_period_holds_more_than_its_count(
        self, rates: RateStore, clock: FrozenClock, near_ms: int
    ) -> None:
        """Ten workers, each with a job to start, asking again when their wait is up (every millisecond at
        the most) for 3 seconds — or, with ``near_ms``, waiting out a wait that short themselves and starting
        then: the starts stay one interval apart, and come at the limit's rate."""
        start = clock.now_ms()
        holding = {worker: f"job-{worker}-0" for worker in range(10)}
        ask_at = dict.fromkeys(holding, start)
        starts: list[int] = []
        for t in range(start, start + 3_000):
            for worker, holder in holding.items():
                if ask_at[worker] > t:
                    continue
                wait = rates.take("api", holder, interval_ms=STEP, now_ms=t, near_ms=near_ms)
                if wait <= near_ms:
                    starts.append(t + wait)
                    holding[worker] = f"job-{worker}-{len(starts)}"
                ask_at[worker] = t + max(wait, 1)
        starts.sort()
        assert all(b - a >= STEP for a, b in itertools.pairwise(starts))
        assert len(starts) >= 3_000 // STEP - 1

    def test_an_instant_within_near_is_the_takers_own_and_none_is_stored(
        self, rates: RateStore, clock: FrozenClock
    ) -> None:
        """A caller that waits up to ``near_ms`` itself: an instant that close is its own to start on with no
        second take (nothing stored); a further one is reserved, and spent once the holder is back within
        ``near_ms`` of it."""
        now = clock.now_ms()
        assert rates.take("api", "job-1", interval_ms=STEP, now_ms=now, near_ms=STEP) == 0
        assert rates.take("api", "job-2", interval_ms=STEP, now_ms=now, near_ms=STEP) == STEP  # near: not stored
        assert rates.take("api", "job-3", interval_ms=STEP, now_ms=now, near_ms=STEP) == 2 * STEP  # reserved
        assert [(s.next_at_ms, s.reserved) for s in rates.state()] == [(now + 3 * STEP, 1)]
        back = now + STEP + STEP // 2
        assert rates.take("api", "job-3", interval_ms=STEP, now_ms=back, near_ms=STEP) == STEP // 2  # spent
        assert [(s.next_at_ms, s.reserved) for s in rates.state()] == [(now + 3 * STEP, 0)]
        assert rates.take("api", "job-4", interval_ms=STEP, now_ms=back, near_ms=STEP) == 3 * STEP - STEP - STEP // 2

    def test_the_state_shows_each_keys_next_instant_and_reservations(
        self, rates: RateStore, clock: FrozenClock
    ) -> None:
        now = clock.now_ms()
        rates.take("api:org-a", "job-1", interval_ms=STEP, now_ms=now)
        rates.take("api:org-a", "job-2", interval_ms=STEP, now_ms=now)
        rates.take("api:org-b", "job-3", interval_ms=STEP, now_ms=now)
        state = {s.key: (s.next_at_ms, s.reserved) for s in rates.state()}
        assert state == {"api:org-a": (now + 2 * STEP, 1), "api:org-b": (now + STEP, 0)}

    def test_forget_drops_schedules_and_reservations_before_an_instant(
        self, rates: RateStore, clock: FrozenClock
    ) -> None:
        now = clock.now_ms()
        rates.take("old", "job-1", interval_ms=STEP, now_ms=now)
        rates.take("old", "job-2", interval_ms=STEP, now_ms=now)  # reserved at now + STEP, never back
        rates.take("new", "job-3", interval_ms=STEP, now_ms=now + 10 * STEP)
        assert rates.forget(before_ms=now + 5 * STEP) == 2  # old's schedule (now + 2I) and job-2's reservation
        assert [s.key for s in rates.state()] == ["new"]


def limited_job(name: str, body: Any, **options: Any) -> JobHandle[Any, Any]:
    """A job of the suite's queue whose input names its org and its number."""
    return job(
        name=name, queue=QUEUE, idempotency_key=lambda i: f"{i['org']}:{i['n']}", tenant=lambda i: i["org"], **options
    )(body)


class FleetLimitContract:
    """What the executor does on the driver's rates and leases: a run over its rate handed back uncounted to
    the instant reserved for it, and a run of an org at its fleet cap handed back uncounted."""

    @pytest.fixture
    def installed(self, driver: JobDriver, clock: FrozenClock) -> Iterator[None]:
        with installed_jobs(clock, driver):
            yield

    def test_a_run_over_its_rate_is_handed_back_uncounted_to_its_reserved_instant(
        self, driver: JobDriver, clock: FrozenClock, installed: None, operator_store: OperatorStore
    ) -> None:
        declared(driver, driver.rates, "rates", "no rate schedules")
        ran: list[int] = []
        metered = limited_job("conformance.metered", lambda run: ran.append(run.input["n"]), rate_limit="2/s")
        first, second = (metered.enqueue({"org": "org-a", "n": n}).id for n in (1, 2))
        env = AttemptEnv(driver=driver, clock=clock)
        outcomes = [execute_job(c, env).outcome for c in claim(driver, limit=2)]
        assert sorted(map(str, outcomes)) == ["None", "completed"] and ran == [1]  # one started, one handed back
        waiting = record(operator_store, second)
        assert (waiting.attempts, waiting.run_at_ms) == (0, clock.now_ms() + 500 - RATE_LEAD_MS)  # just ahead
        clock.advance(500 - RATE_LEAD_MS)
        [again] = claim(driver)  # due a little ahead of its instant: it waits the rest in its slot
        assert (again.id, execute_job(again, env).outcome, again.attempt) == (second, "completed", 1)
        assert ran == [1, 2] and record(operator_store, first).state == "done"

    def test_a_run_of_an_org_at_its_fleet_cap_is_handed_back_while_another_org_runs(
        self, driver: JobDriver, clock: FrozenClock, installed: None, operator_store: OperatorStore
    ) -> None:
        declared(driver, driver.leases, "leases", "no fleet lease store")
        env = AttemptEnv(driver=driver, clock=clock, fleet_per_tenant={QUEUE: 1})
        inner: list[Any] = []

        def nested(run: JobRun[Any]) -> None:
            if run.input["n"] == 1:  # while org A's first run holds its slot, the others get their turn
                inner.extend(execute_job(c, env).outcome for c in claim(driver, limit=2))

        capped = limited_job("conformance.capped", nested)
        capped.enqueue({"org": "org-a", "n": 1})
        second = capped.enqueue({"org": "org-a", "n": 2}).id
        other = capped.enqueue({"org": "org-b", "n": 3}).id
        [first] = claim(driver, limit=1)
        assert execute_job(first, env).outcome == "completed"
        assert sorted(map(str, inner)) == ["None", "completed"]  # org B ran; org A's second was handed back
        assert record(operator_store, other).state == "done"
        assert (record(operator_store, second).state, record(operator_store, second).attempts) == ("ready", 0)
