"""``job_scheduler()`` on the frozen clock with the memory driver's lease and watermarks: the catch-up
policies over a day of downtime, DST switch days, pauses, the idle round, leadership, the fence and
the drain."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import JobsEnv
from tests.helpers import eventually
from ultimate_jobs import JobRun, JobScheduler, TaskHandle, job, job_scheduler, task
from ultimate_jobs.contracts.protocol import SchedulerStore
from ultimate_jobs.contracts.schedules import Fire, FireResult
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.errors import InvariantError, UltimateError
from ultimate_jobs.scheduler import PAUSE_RECHECK_MS, LeaseLeader, MemoryLeader, lease_leader
from ultimate_jobs.scheduler.cron import CronSchedule, from_ms, to_ms
from ultimate_jobs.scheduler.leader import LEADER_LEASE_NAME, Leader
from ultimate_jobs.scheduler.runtime import FIRE_RETRY_MS

HOUR = 3_600_000
DAY = 24 * HOUR
SECOND = 1_000


def at(*parts: int) -> int:
    return to_ms(datetime(*parts, tzinfo=UTC))  # type: ignore[misc]


@pytest.fixture
def tick(jobs: JobsEnv) -> JobHandle[Any, Any]:
    """The job every test task enqueues: one row per (task, occurrence)."""

    @job(idempotency_key=lambda i: f"{i['task']}:{i['occurrence_ms']}", tenant="none")
    def record_tick(run: JobRun[Any]) -> None:
        return None

    return record_tick


def hourly(tick: JobHandle[Any, Any], *, name: str = "hourly", **options: Any) -> TaskHandle:
    options.setdefault("cron", "0 * * * *")
    options.setdefault("tz", "UTC")

    def body(occurrence_ms: int) -> list[tuple[JobHandle[Any, Any], Any]]:
        return [(tick, {"task": name, "occurrence_ms": occurrence_ms})]

    body.__name__ = name
    return task(**options)(body)


def scheduler(
    jobs: JobsEnv,
    tasks: list[TaskHandle],
    *,
    leader: Leader | None = None,
    state: SchedulerStore | None = None,
) -> JobScheduler:
    built = job_scheduler(driver=jobs.driver, tasks=tasks, leader=leader, state=state, clock=jobs.clock)
    built.start(loop=False)
    return built


def lease_holder(jobs: JobsEnv) -> str | None:
    """Who holds the scheduler's lease in the memory driver's lease store (``None``: nobody)."""
    lease = jobs.driver.leader.current(LEADER_LEASE_NAME)
    return lease.holder if lease is not None else None


def fired(jobs: JobsEnv, name: str = "hourly") -> list[int]:
    """Every occurrence that has a job row, in order (one row per occurrence, or the test fails)."""
    occurrences = [
        int(row.input["occurrence_ms"]) for row in jobs.driver.rows.values() if row.input.get("task") == name
    ]
    assert len(occurrences) == len(set(occurrences)), f"an occurrence fired twice: {sorted(occurrences)}"
    return sorted(occurrences)


def rounds(sched: JobScheduler, jobs: JobsEnv, *, every_ms: int, count: int) -> int:
    total = 0
    for _ in range(count):
        jobs.clock.advance(every_ms)
        total += sched.run_once()
    return total


# -- catch-up over a day of downtime -----------------------------------------------------------


def down_for_a_day(jobs: JobsEnv, tick: JobHandle[Any, Any], policy: str) -> tuple[JobScheduler, int]:
    """A scheduler arms an hourly task at 00:00 and goes away; another starts 24.5 hours later on the
    same stored watermarks (the driver's). Answers the second one and the instant it came up."""
    task_ = hourly(tick, catch_up=policy)
    first = scheduler(jobs, [task_])
    assert first.run_once() == 0  # arming moves the watermark and is not a fire
    assert jobs.driver.operator.task_fires() == []
    first.stop()
    jobs.clock.advance(DAY + 30 * 60_000)
    return scheduler(jobs, [task_]), jobs.clock.now_ms()


def test_skip_fires_once_at_the_latest_missed_occurrence(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    start = jobs.clock.now_ms()
    back, _ = down_for_a_day(jobs, tick, "skip")
    assert back.run_once() == 1
    assert fired(jobs) == [start + DAY]
    assert [(f.task, f.occurrence_ms) for f in jobs.driver.operator.task_fires()] == [("hourly", start + DAY)]
    assert rounds(back, jobs, every_ms=SECOND, count=29 * 60) == 0  # nothing until the next real occurrence
    assert rounds(back, jobs, every_ms=SECOND, count=60) == 1
    assert fired(jobs) == [start + DAY, start + DAY + HOUR]


def test_run_once_fires_the_earliest_once_then_waits_for_the_next_real_one(
    jobs: JobsEnv, tick: JobHandle[Any, Any]
) -> None:
    start = jobs.clock.now_ms()
    back, _ = down_for_a_day(jobs, tick, "run-once")
    assert back.run_once() == 1
    assert fired(jobs) == [start + HOUR]
    assert back.watermarks() == {"hourly": start + DAY}  # passed the other 23 in the same fire
    assert rounds(back, jobs, every_ms=SECOND, count=30 * 60) == 1
    assert fired(jobs) == [start + HOUR, start + DAY + HOUR]


def test_run_all_walks_at_most_max_catch_up_per_tick_and_fires_every_one_eventually(
    jobs: JobsEnv, tick: JobHandle[Any, Any]
) -> None:
    start = jobs.clock.now_ms()
    back, _ = down_for_a_day(jobs, tick, "run-all")
    assert [back.run_once() for _ in range(4)] == [10, 10, 4, 0]
    assert fired(jobs) == [start + h * HOUR for h in range(1, 25)]
    assert jobs.driver.operator.task_fires()[0].occurrence_ms == start + DAY


def test_max_catch_up_is_per_task(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    task_ = hourly(tick, catch_up="run-all", max_catch_up=3)
    scheduler(jobs, [task_]).run_once()
    jobs.clock.advance(10 * HOUR)  # the first one's lease lapsed long ago
    back = scheduler(jobs, [task_])
    assert [back.run_once() for _ in range(5)] == [3, 3, 3, 1, 0]


# -- DST switch days ---------------------------------------------------------------------------


@pytest.mark.slow
def test_0_3_in_a_dst_zone_on_both_switch_days(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    helsinki = ZoneInfo("Europe/Helsinki")
    nightly = hourly(tick, name="nightly", cron="0 3 * * *", tz="Europe/Helsinki")
    for first_day in (at(2026, 3, 27), at(2026, 10, 23)):  # two days before each switch day
        jobs.clock.set(first_day)
        sched = scheduler(jobs, [nightly])
        sched.run_once()
        rounds(sched, jobs, every_ms=60 * SECOND, count=4 * 24 * 60)  # four days, a round a minute
        sched.stop()
    per_day: dict[date, list[str]] = {}
    for occurrence in fired(jobs, "nightly"):
        local = from_ms(occurrence, helsinki)
        per_day.setdefault(local.date(), []).append(local.strftime("%H:%M%z"))
    assert date(2026, 3, 29) not in per_day  # 03:00 never happened there
    assert per_day[date(2026, 3, 30)] == ["03:00+0300"]
    assert per_day[date(2026, 10, 25)] == ["03:00+0300", "03:00+0200"]  # it happened twice
    assert all(len(v) == 1 for d, v in per_day.items() if d != date(2026, 10, 25))


# -- the idle round ----------------------------------------------------------------------------


class CountingLeader(MemoryLeader):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.asks = 0

    def acquire(self) -> bool:
        self.asks += 1
        return super().acquire()


class CountingLease(LeaseLeader):
    """A lease leader over the memory driver's lease store, counting its asks."""

    def __init__(self, jobs: JobsEnv, holder: str) -> None:
        store = jobs.driver.leader
        super().__init__(jobs.driver, store=store, ttl_ms=30_000, holder=holder, clock=jobs.clock, name="scheduler")
        self.asks = 0

    def acquire(self, *, rollup: bool = False) -> bool:
        self.asks += 1
        return super().acquire(rollup=rollup)


class CountingState:
    """The driver's scheduler state, counting loads and fires."""

    def __init__(self, inner: SchedulerStore) -> None:
        self.inner, self.durable = inner, inner.durable
        self.loads = 0
        self.fires = 0

    def load(self, tasks: Any, *, now_ms: int) -> dict[str, int]:
        self.loads += 1
        return self.inner.load(tasks, now_ms=now_ms)

    def fire(self, fire: Fire) -> FireResult:
        self.fires += 1
        return self.inner.fire(fire)


def test_an_idle_minute_with_35_tasks_asks_the_lease_6_times_and_reads_nothing_else(
    jobs: JobsEnv, tick: JobHandle[Any, Any]
) -> None:
    tasks = [hourly(tick, name=f"nightly-{i}", cron="0 3 * * *") for i in range(35)]
    evaluations = {"n": 0}

    class Counted(CronSchedule):
        def next_after(self, after_ms: int) -> int:
            evaluations["n"] += 1
            return super().next_after(after_ms)

    for handle in tasks:
        handle.schedule = Counted(handle.cron, handle.schedule.zone)
    leader, state = CountingLeader(), CountingState(jobs.driver.scheduler_state)
    sched = scheduler(jobs, tasks, leader=leader, state=state)
    sched.run_once()
    assert (leader.asks, state.loads, evaluations["n"]) == (1, 1, 35)  # armed: each next occurrence resolved once
    leader.asks = evaluations["n"] = 0
    rollups = {"n": 0}
    jobs.driver.rollup_counters = lambda: rollups.__setitem__("n", rollups["n"] + 1) or 0  # type: ignore[method-assign]
    assert rounds(sched, jobs, every_ms=SECOND, count=600) == 0  # ten idle minutes, a round a second
    assert leader.asks == 60  # every renew_every_ms (10 s): 6 a minute, for 35 tasks
    assert (state.loads, state.fires, evaluations["n"]) == (1, 0, 0)  # no store read, no cron resolved
    assert rollups["n"] == 10  # once a minute, by the leader


# -- pause / resume ----------------------------------------------------------------------------


def test_a_paused_task_is_not_dispatched_and_its_catch_up_decides_on_resume(
    jobs: JobsEnv, tick: JobHandle[Any, Any]
) -> None:
    start = jobs.clock.now_ms()
    state = CountingState(jobs.driver.scheduler_state)
    sched = scheduler(jobs, [hourly(tick)], state=state)
    sched.run_once()
    jobs.driver.operator.pause_task("hourly")
    jobs.clock.advance(HOUR)
    assert sched.run_once() == 0 and state.fires == 1  # checked when due
    assert sched.stats.paused == 1 and sched.next_due()["hourly"] == start + HOUR + PAUSE_RECHECK_MS
    assert rounds(sched, jobs, every_ms=SECOND, count=4) == 0 and state.fires == 1  # not asked again before 5 s
    assert rounds(sched, jobs, every_ms=SECOND, count=1) == 0 and state.fires == 2  # looked at again after 5 s
    jobs.clock.advance(2 * HOUR)
    jobs.driver.operator.resume_task("hourly")
    assert rounds(sched, jobs, every_ms=SECOND, count=5) == 1  # the resume's latency is the recheck
    assert fired(jobs) == [start + 3 * HOUR]  # skip: the latest missed occurrence, once


# -- leadership --------------------------------------------------------------------------------


def test_a_standby_asks_every_renewal_interval_and_takes_over_after_the_ttl(
    jobs: JobsEnv, tick: JobHandle[Any, Any]
) -> None:
    start = jobs.clock.now_ms()
    minutely = hourly(tick, name="minutely", cron="* * * * *", catch_up="run-all")
    a_leader, b_leader = CountingLease(jobs, "a"), CountingLease(jobs, "b")  # one lease: the driver's
    a = scheduler(jobs, [minutely], leader=a_leader)
    b = scheduler(jobs, [minutely], leader=b_leader)
    for _ in range(120):  # two minutes, both ticking every second
        jobs.clock.advance(SECOND)
        a.run_once()
        b.run_once()
    assert a.leading and not b.leading
    assert b_leader.asks == 12  # every 10 s, not every round
    assert fired(jobs, "minutely") == [start + 60_000, start + 120_000]
    crashed_at = jobs.clock.now_ms()  # A dies: no more rounds, no release; its lease lapses on its own
    while not b.leading:
        jobs.clock.advance(SECOND)
        b.run_once()
        assert jobs.clock.now_ms() < crashed_at + 30_000 + 10_000
    assert jobs.clock.now_ms() >= crashed_at + 30_000 - 10_000  # the lease A renewed last was still live
    assert lease_holder(jobs) == "b"
    for _ in range(120):
        jobs.clock.advance(SECOND)
        b.run_once()
    assert fired(jobs, "minutely") == [start + m * 60_000 for m in range(1, 5)]  # none missed, none twice


def test_a_new_term_reloads_the_watermarks_and_a_stale_fire_is_fenced(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    start = jobs.clock.now_ms()
    task_ = hourly(tick)
    a, b = scheduler(jobs, [task_], leader=MemoryLeader()), scheduler(jobs, [task_], leader=MemoryLeader())  # both lead
    a.run_once()
    b.run_once()
    jobs.clock.advance(HOUR)
    assert a.run_once() == 1
    assert b.run_once() == 0 and b.stats.fenced == 1  # B's watermark was stale: the fire wrote nothing
    jobs.clock.advance(SECOND * 10)
    b.run_once()
    assert b.watermarks() == {"hourly": start + HOUR}  # reloaded
    assert fired(jobs) == [start + HOUR]


def test_a_leader_whose_renewals_fail_stops_acting_before_its_lease_could_lapse(
    jobs: JobsEnv, tick: JobHandle[Any, Any]
) -> None:
    class Flaky(MemoryLeader):
        down = False

        def acquire(self) -> bool:
            if self.down:
                raise ConnectionError("database unreachable")
            return super().acquire()

    leader = Flaky(ttl="30s")
    sched = scheduler(jobs, [hourly(tick)], leader=leader)
    sched.run_once()
    leader.down = True
    rounds(sched, jobs, every_ms=SECOND, count=19)
    assert sched.leading  # the last renewal (t=0) is good for 30 s; it acts for 20 of them
    rounds(sched, jobs, every_ms=SECOND, count=1)
    assert not sched.leading and sched.watermarks() == {}
    leader.down = False
    rounds(sched, jobs, every_ms=SECOND, count=1)
    assert sched.leading


def test_one_round_at_a_time(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    inside, release, most = [0], threading.Event(), [0]

    def slow(occurrence_ms: int) -> list[Any]:
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        release.wait(5)
        inside[0] -= 1
        return []

    sched = scheduler(jobs, [task(cron="* * * * *", tz="UTC")(slow)])
    sched.run_once()
    jobs.clock.advance(60_000)
    threads = [threading.Thread(target=sched.run_once) for _ in range(2)]
    for thread in threads:
        thread.start()
    eventually(lambda: inside[0] == 1)
    release.set()
    for thread in threads:
        thread.join(5)
    assert most[0] == 1


# -- failures ----------------------------------------------------------------------------------


def test_a_task_whose_entries_fail_is_retried_later_and_its_occurrence_is_kept(
    jobs: JobsEnv, tick: JobHandle[Any, Any]
) -> None:
    start = jobs.clock.now_ms()
    broken = {"yes": True}

    def flaky(occurrence_ms: int) -> list[Any]:
        if broken["yes"]:
            raise RuntimeError("a bug in the task body")
        return [(tick, {"task": "hourly", "occurrence_ms": occurrence_ms})]

    flaky.__name__ = "hourly"
    sched = scheduler(jobs, [task(cron="0 * * * *", tz="UTC")(flaky)])
    sched.run_once()
    jobs.clock.advance(HOUR)
    assert sched.run_once() == 0 and sched.stats.failures == 1
    assert sched.next_due()["hourly"] == start + HOUR + FIRE_RETRY_MS
    broken["yes"] = False
    assert rounds(sched, jobs, every_ms=SECOND, count=5) == 1
    assert fired(jobs) == [start + HOUR]


# -- the drain ---------------------------------------------------------------------------------


def test_a_drained_scheduler_hands_the_lease_back(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    sched = scheduler(jobs, [hourly(tick)], leader=lease_leader(jobs.driver, holder="a", clock=jobs.clock))
    sched.run_once()
    assert lease_holder(jobs) == "a"
    assert sched.drain() is True
    assert sched.state == "stopped" and lease_holder(jobs) is None
    jobs.clock.advance(HOUR)
    assert sched.run_once() == 0  # stopped: dispatches nothing


def test_an_abandoned_round_keeps_the_lease(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(occurrence_ms: int) -> list[Any]:
        entered.set()
        release.wait(5)
        return [(tick, {"task": "stuck", "occurrence_ms": occurrence_ms})]

    stuck.__name__ = "stuck"
    sched = scheduler(
        jobs,
        [task(cron="* * * * *", tz="UTC")(stuck)],
        leader=lease_leader(jobs.driver, holder="a", clock=jobs.clock),
    )
    sched.run_once()
    jobs.clock.advance(60_000)
    round_ = threading.Thread(target=sched.run_once)
    round_.start()
    eventually(entered.is_set)
    assert sched.drain(50) is False  # the round is still enqueueing at the deadline
    assert lease_holder(jobs) == "a"  # a standby must not be promoted onto this occurrence
    release.set()
    round_.join(5)
    assert fired(jobs, "stuck") == [jobs.clock.now_ms()]  # the round it was in finished its fire


def test_accept_stops_a_round_before_its_next_fire(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    holder: list[JobScheduler] = []

    def draining(occurrence_ms: int) -> list[Any]:
        holder[0].accept(reason="SIGTERM")  # the drain lands mid-round
        return [(tick, {"task": "draining", "occurrence_ms": occurrence_ms})]

    draining.__name__ = "draining"
    catching_up = task(cron="0 * * * *", tz="UTC", catch_up="run-all")(draining)
    scheduler(jobs, [catching_up]).run_once()
    jobs.clock.advance(5 * HOUR)  # the first one's lease lapsed long ago
    holder.append(scheduler(jobs, [catching_up]))
    assert holder[0].run_once() == 1  # the fire in flight lands; the other four wait for the next leader
    assert holder[0].state == "draining"


# -- building and lifecycle refusals -----------------------------------------------------------


def test_building_refusals(jobs: JobsEnv, tick: JobHandle[Any, Any]) -> None:
    with pytest.raises(InvariantError):
        job_scheduler(driver=None)  # type: ignore[arg-type]
    with pytest.raises(InvariantError):
        job_scheduler(driver=jobs.driver, tick_interval=0)
    with pytest.raises(InvariantError):
        job_scheduler(driver=jobs.driver, tasks=[tick])  # type: ignore[list-item]
    with pytest.raises(UltimateError) as bad_ttl:
        MemoryLeader(ttl=2)
    assert bad_ttl.value.code == "X_INVARIANT"
    sched = scheduler(jobs, [])
    with pytest.raises(InvariantError):
        sched.start(loop=False)  # already running
    sched.check_durable()  # the memory pair is fine on the memory driver
    assert sched.run_once() == 0


def test_the_defaults_are_every_registered_task_and_the_drivers_own_lease_and_watermarks(
    jobs: JobsEnv, tick: JobHandle[Any, Any]
) -> None:
    registered = hourly(tick)
    sched = job_scheduler(driver=jobs.driver)
    names = [t.name for t in sched.tasks()]
    assert registered.name in names and "nightly_sales_report" in names  # the demo app's tasks.py, autodiscovered
    assert isinstance(sched.leader, LeaseLeader) and sched.leader.store is jobs.driver.leader
    assert sched.store is jobs.driver.scheduler_state
    assert not sched.leader.durable and not sched.store.durable  # the memory driver's: this process only


@pytest.fixture
def looping(jobs: JobsEnv) -> Iterator[list[JobScheduler]]:
    started: list[JobScheduler] = []
    yield started
    for sched in started:
        sched.stop()


def test_the_loop_runs_rounds_until_stopped(jobs: JobsEnv, looping: list[JobScheduler]) -> None:
    sched = job_scheduler(driver=MemoryDriver(clock=jobs.clock), tasks=[], clock=jobs.clock, tick_interval="10ms")
    looping.append(sched)
    sched.start()
    eventually(lambda: sched.stats.rounds >= 3)
    sched.stop()
    assert sched.state == "stopped"
