"""The rate half of the conformance suite: ``driver.rates``, the fleet-wide schedule of starts per rate key.

A mixin of :class:`~ultimate_jobs.testing.conformance.DriverConformance`; its ``rates`` fixture skips, saying
so, on a driver that declares ``rates = None``. The rules (the one decision every store makes,
:func:`ultimate_jobs.drivers.rates.decide`): one start per interval per key; a take that finds the key busy
reserves the next free instant for its holder and answers the wait; back at that instant (within one
interval) the holder starts on its reservation without taking another; back later, it takes anew.
"""

from __future__ import annotations

import itertools

import pytest

from ..drivers.protocol import JobDriver, RateStore
from .clock import FrozenClock
from .conformance_support import declared

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

    def test_no_window_of_one_period_holds_more_than_its_count(self, rates: RateStore, clock: FrozenClock) -> None:
        """Ten workers, each with a job to start, asking again when their wait is up (every millisecond at
        the most) for 3 seconds: the starts stay one interval apart, and come at the limit's rate."""
        start = clock.now_ms()
        jobs = {worker: f"job-{worker}-0" for worker in range(10)}
        ask_at = dict.fromkeys(jobs, start)
        starts: list[int] = []
        for t in range(start, start + 3_000):
            for worker, job in jobs.items():
                if ask_at[worker] > t:
                    continue
                wait = rates.take("api", job, interval_ms=STEP, now_ms=t)
                if wait == 0:
                    starts.append(t)
                    jobs[worker] = f"job-{worker}-{len(starts)}"
                ask_at[worker] = t + max(wait, 1)
        assert all(b - a >= STEP for a, b in itertools.pairwise(starts))
        assert len(starts) >= 3_000 // STEP - 1

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
