"""The scheduler half of the conformance suite: ``driver.leader`` (the leader-election lease),
``driver.scheduler_state`` (watermarks and the fire) and the counter rollup the leader owes.

A mixin of :class:`~ultimate_jobs.testing.conformance.DriverConformance`. A test asks for the
``leader_store`` or ``scheduler_state`` fixture, which skips (with its reason) only on a driver that
declares that capability ``None``. Every instant is pinned, so every driver answers the same leases,
watermarks, rows and counter buckets for the same history.
"""

from __future__ import annotations

from typing import Any

import pytest

from ..contracts.operator import JobFilter
from ..contracts.protocol import JobDriver, LeaderStore, OperatorStore, SchedulerStore
from ..contracts.schedules import Fire, FireResult, LeaderLease, TaskFire
from ..contracts.series import COUNTER_TIERS
from .clock import FrozenClock
from .conformance_support import QUEUE, claim_one, declared, request, settle_done

TTL = 30_000
LEASE = "conformance.lease"
MINUTE = COUNTER_TIERS[0][0]
FIVE_MINUTES = COUNTER_TIERS[1][0]
HOUR = COUNTER_TIERS[2][0]
DAY = 24 * HOUR


def _fire(task: str, previous: int, to: int, now: int, *keys: str, **fields: Any) -> Fire:
    """A fire of ``task`` from ``previous`` to ``to`` (the occurrence), enqueueing one request per key."""
    return Fire(task, previous, to, to, [request(key=key, **fields) for key in keys], now)


def _rows(operator_store: OperatorStore, key_prefix: str) -> list[tuple[str, str, int]]:
    """(key, state, created_at_ms) of every row whose key starts with ``key_prefix``, by key."""
    page = operator_store.list(JobFilter(limit=200)).rows
    return sorted(
        (r.idempotency_key, r.state, r.created_at_ms) for r in page if r.idempotency_key.startswith(key_prefix)
    )


def _buckets(operator_store: OperatorStore, job: str) -> list[tuple[int, int, int, int]]:
    return [(b.bucket_ms, b.width_ms, b.done, b.duration_ms) for b in operator_store.counters(job=job, since_ms=0)]


class SchedulerContract:
    """``driver.leader`` and ``driver.scheduler_state``: what the scheduler stores, on every driver alike."""

    # -- the leader lease ----------------------------------------------------------------------

    def test_leader_acquire_takes_a_free_lease_and_renewing_keeps_the_term(
        self, leader_store: LeaderStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        assert leader_store.current(LEASE) is None
        taken = leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=start)
        assert taken == LeaderLease(LEASE, "a", start, start + TTL)
        assert leader_store.current(LEASE) == taken
        renewed = leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=start + 10_000)
        assert renewed == LeaderLease(LEASE, "a", start, start + 40_000)  # a renewal keeps acquired_at
        assert leader_store.current(LEASE) == renewed

    def test_leader_acquire_is_refused_while_another_holds_it_and_steals_it_at_the_ttl(
        self, leader_store: LeaderStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        assert leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=start) is not None
        assert leader_store.acquire(LEASE, "b", ttl_ms=TTL, now_ms=start + TTL - 1) is None
        assert leader_store.current(LEASE) == LeaderLease(LEASE, "a", start, start + TTL)  # the refusal wrote nothing
        stolen = leader_store.acquire(LEASE, "b", ttl_ms=TTL, now_ms=start + TTL)  # the expiry is exclusive
        assert stolen == LeaderLease(LEASE, "b", start + TTL, start + 2 * TTL)  # a new term
        assert leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=start + TTL + 1) is None  # demoted
        assert leader_store.release(LEASE, "a") is False  # the demoted holder cannot drop the new lease
        assert leader_store.current(LEASE) == stolen

    def test_leader_reacquiring_its_own_lapsed_lease_starts_a_new_term(
        self, leader_store: LeaderStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=start)
        again = leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=start + TTL)
        assert again == LeaderLease(LEASE, "a", start + TTL, start + 2 * TTL)

    def test_leader_release_is_fenced_on_the_holder(self, leader_store: LeaderStore, clock: FrozenClock) -> None:
        start = clock.now_ms()
        held = leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=start)
        assert leader_store.release(LEASE, "b") is False  # not b's lease: left alone
        assert leader_store.current(LEASE) == held
        assert leader_store.release(LEASE, "a") is True
        assert leader_store.current(LEASE) is None
        assert leader_store.release(LEASE, "a") is False
        taken = leader_store.acquire(LEASE, "b", ttl_ms=TTL, now_ms=start + 1)  # at once, not after the TTL
        assert taken == LeaderLease(LEASE, "b", start + 1, start + 1 + TTL)

    def test_leader_leases_are_independent_by_name(self, leader_store: LeaderStore, clock: FrozenClock) -> None:
        start = clock.now_ms()
        assert leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=start) is not None
        assert leader_store.acquire(f"{LEASE}.other", "b", ttl_ms=TTL, now_ms=start) is not None
        assert leader_store.release(f"{LEASE}.other", "b") is True
        assert leader_store.current(LEASE) == LeaderLease(LEASE, "a", start, start + TTL)

    def test_leader_acquire_with_rollup_folds_only_when_the_lease_lands(
        self, driver: JobDriver, leader_store: LeaderStore, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        name = "conformance.lease-rollup"
        start = clock.set(clock.now_ms() + (-clock.now_ms() % HOUR))
        settle_done(driver, name, duration_ms=5)
        now = clock.advance(2 * DAY)
        assert leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=now) is not None
        assert leader_store.acquire(LEASE, "b", ttl_ms=TTL, now_ms=now, rollup=True) is None
        assert _buckets(operator_store, name) == [(start, MINUTE, 1, 5)]  # refused: nothing folded
        assert leader_store.acquire(LEASE, "a", ttl_ms=TTL, now_ms=now, rollup=True) is not None
        assert _buckets(operator_store, name) == [(start, FIVE_MINUTES, 1, 5)]

    # -- the counter rollup: one algorithm, the same buckets on every driver ---------------------

    @pytest.mark.parametrize("carrier", ["driver", "leader"])
    def test_rollup_over_forty_days_answers_these_buckets(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock, carrier: str
    ) -> None:
        """Folds in one step to the narrowest retained tier — 1-minute to 5-minute, 1-minute straight to
        1-hour, 5-minute to 1-hour merging two buckets, and drops past 30 days — whether the rollup is
        ``driver.rollup_counters()`` or rides on the leader's renewal."""
        name = "conformance.month"
        if carrier == "leader":
            store = declared(driver, driver.leader, "leader", "no leader lease store")

            def fold() -> None:
                assert store.acquire(LEASE, "roller", ttl_ms=TTL, now_ms=clock.now_ms(), rollup=True) is not None

        else:

            def fold() -> None:
                driver.rollup_counters()

        s = clock.set(clock.now_ms() + (-clock.now_ms() % HOUR))
        settle_done(driver, name, duration_ms=1)
        clock.advance(MINUTE)
        settle_done(driver, name, duration_ms=2)
        clock.advance(9 * MINUTE)
        settle_done(driver, name, duration_ms=4)
        clock.set(s + 25 * HOUR)
        fold()  # the day-old minutes to 5-minute buckets
        assert _buckets(operator_store, name) == [(s, FIVE_MINUTES, 2, 3), (s + 10 * MINUTE, FIVE_MINUTES, 1, 4)]
        settle_done(driver, name, duration_ms=8)
        clock.set(s + 8 * DAY + 2 * HOUR)
        fold()  # the week-old 5-minute buckets to one hour; a minute whose 5-minute bucket expired, straight on
        assert _buckets(operator_store, name) == [(s, HOUR, 3, 7), (s + 25 * HOUR, HOUR, 1, 8)]
        settle_done(driver, name, duration_ms=16)  # dropped at once by the last fold: older than 30 days by then
        clock.set(s + 38 * DAY)
        settle_done(driver, name, duration_ms=32)
        clock.set(s + 40 * DAY - 30 * MINUTE)
        settle_done(driver, name, duration_ms=64)
        clock.set(s + 40 * DAY)
        fold()
        assert _buckets(operator_store, name) == [
            (s + 38 * DAY, FIVE_MINUTES, 1, 32),
            (s + 40 * DAY - 30 * MINUTE, MINUTE, 1, 64),
        ]
        totals = {t.job: (t.done, t.duration_ms) for t in operator_store.counter_totals(0)}
        assert totals[name] == (2, 96)

    def test_rollup_counts_what_it_folded_or_dropped(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        name = "conformance.counted"
        s = clock.set(clock.now_ms() + (-clock.now_ms() % HOUR))
        for _ in range(3):
            settle_done(driver, name)
            clock.advance(MINUTE)
        clock.set(s + 25 * HOUR)
        assert driver.rollup_counters() == 3  # three 1-minute buckets into one 5-minute bucket
        clock.set(s + 31 * DAY)
        assert driver.rollup_counters() == 1  # the 5-minute bucket, dropped
        assert driver.rollup_counters() == 0
        assert _buckets(operator_store, name) == []

    # -- the watermarks ------------------------------------------------------------------------

    def test_load_arms_missing_tasks_at_now_and_keeps_stored_ones(
        self, scheduler_state: SchedulerStore, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        assert scheduler_state.load(["t.a", "t.b"], now_ms=start) == {"t.a": start, "t.b": start}
        later = scheduler_state.load(["t.b", "t.a", "t.c"], now_ms=start + 5)
        assert later == {"t.a": start, "t.b": start, "t.c": start + 5}
        assert scheduler_state.load([], now_ms=start) == {}
        assert operator_store.task_fires() == []  # arming is not a fire
        assert _rows(operator_store, "") == []

    def test_fire_moves_the_watermark_inserts_the_rows_and_records_the_fire(
        self, driver: JobDriver, scheduler_state: SchedulerStore, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        scheduler_state.load(["t.hourly"], now_ms=start)
        occurrence, now = start + HOUR, start + HOUR + 7
        fired = scheduler_state.fire(_fire("t.hourly", start, occurrence, now, "fire:1", "fire:2"))
        assert fired == FireResult("fired", 2)
        assert scheduler_state.load(["t.hourly"], now_ms=0) == {"t.hourly": occurrence}
        assert _rows(operator_store, "fire:") == [("fire:1", "ready", now), ("fire:2", "ready", now)]
        assert operator_store.task_fires() == [TaskFire("t.hourly", occurrence, now)]
        clock.set(now)
        assert claim_one(driver, queues=(QUEUE,)).idempotency_key in {"fire:1", "fire:2"}  # real, claimable jobs

    def test_a_stale_fire_is_fenced_and_writes_nothing(
        self, scheduler_state: SchedulerStore, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        scheduler_state.load(["t.hourly"], now_ms=start)
        first = _fire("t.hourly", start, start + HOUR, start + HOUR, "fenced:1")
        assert scheduler_state.fire(first).outcome == "fired"
        again = _fire("t.hourly", start, start + HOUR, start + HOUR + 1, "fenced:2")  # read the old watermark
        assert scheduler_state.fire(again) == FireResult("fenced")
        never_loaded = _fire("t.unknown", start, start + HOUR, start + HOUR, "fenced:3")
        assert scheduler_state.fire(never_loaded) == FireResult("fenced")
        assert [key for key, _, _ in _rows(operator_store, "fenced:")] == ["fenced:1"]
        assert operator_store.task_fires() == [TaskFire("t.hourly", start + HOUR, start + HOUR)]
        assert scheduler_state.load(["t.hourly", "t.unknown"], now_ms=start + 2 * HOUR)["t.hourly"] == start + HOUR

    def test_a_paused_task_fires_nothing_until_resumed(
        self, scheduler_state: SchedulerStore, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        scheduler_state.load(["t.paused"], now_ms=start)
        operator_store.pause_task("t.paused")
        fire = _fire("t.paused", start, start + HOUR, start + HOUR, "paused:1")
        assert scheduler_state.fire(fire) == FireResult("paused")
        assert scheduler_state.load(["t.paused"], now_ms=0) == {"t.paused": start}
        assert _rows(operator_store, "paused:") == [] and operator_store.task_fires() == []
        operator_store.resume_task("t.paused")
        assert scheduler_state.fire(fire) == FireResult("fired", 1)

    def test_a_fire_dedupes_on_a_live_key_and_an_existing_id(
        self, driver: JobDriver, scheduler_state: SchedulerStore, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        scheduler_state.load(["t.dedupe"], now_ms=start)
        held = driver.enqueue(request(key="dedupe:held")).id
        fire = _fire("t.dedupe", start, start + HOUR, start + HOUR, "dedupe:held", on_conflict="error")
        assert scheduler_state.fire(fire) == FireResult("fired", 0)  # the watermark moved, no row inserted
        same_id = Fire("t.dedupe", start + HOUR, start + 2 * HOUR, start + 2 * HOUR, [request(id=held)], start)
        assert scheduler_state.fire(same_id) == FireResult("fired", 0)
        assert [r.id for r in operator_store.list(JobFilter()).rows] == [held]
        assert operator_store.task_fires() == [TaskFire("t.dedupe", start + 2 * HOUR, start)]

    def test_task_fires_keep_the_last_dispatch_per_task(
        self, scheduler_state: SchedulerStore, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        start = clock.now_ms()
        scheduler_state.load(["t.b", "t.a"], now_ms=start)
        assert scheduler_state.fire(_fire("t.b", start, start + 1_000, start + 5)).outcome == "fired"
        assert scheduler_state.fire(_fire("t.a", start, start + 2_000, start + 6)).outcome == "fired"
        assert scheduler_state.fire(_fire("t.b", start + 1_000, start + 3_000, start + 7)).outcome == "fired"
        assert operator_store.task_fires() == [
            TaskFire("t.a", start + 2_000, start + 6),
            TaskFire("t.b", start + 3_000, start + 7),
        ]
