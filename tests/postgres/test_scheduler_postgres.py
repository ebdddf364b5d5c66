"""The scheduler on the Postgres driver's lease row and stored watermarks (``driver.leader``,
``driver.scheduler_state``): SQL_SCHEDULER_FIRE (fence, pause, dedupe, wake, one statement), catch-up
across a redeploy, two schedulers over many rounds, the rollup carried by a renewal, the idle statement
count, and the refusal of a leader that dies with its process."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from tests.conftest import Env, installed
from ultimate_jobs import JobRun, TaskHandle, job, job_scheduler, task
from ultimate_jobs.contracts.protocol import JobDriver
from ultimate_jobs.contracts.schedules import Fire
from ultimate_jobs.contracts.series import COUNTER_TIERS
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.executor import Binding, Params
from ultimate_jobs.drivers.postgres.queries import scheduler as scheduler_sql
from ultimate_jobs.drivers.postgres.queries.jobs import WAKE_CHANNEL
from ultimate_jobs.drivers.postgres.wake import conninfo_for
from ultimate_jobs.errors import InvariantError
from ultimate_jobs.scheduler import LeaseLeader, MemoryLeader, lease_leader
from ultimate_jobs.scheduler.boot import scheduler_from_settings
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance import request, settle_done

pytestmark = [pytest.mark.postgres]

HOUR = 3_600_000
DAY = 24 * HOUR
SECOND = 1_000
WAIT = 5.0
SENTINEL = "scheduler-sentinel"

PgEnv = Env[PostgresDriver]


class CountingExecutor:
    """The driver's executor, counting every statement sent through it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.alias, self.statements = inner, inner.alias, 0

    def query(self, sql: str, params: Params = None, *, binding: Binding = "django") -> list[tuple[Any, ...]]:
        self.statements += 1
        return self.inner.query(sql, params, binding=binding)  # type: ignore[no-any-return]


def counting(env: PgEnv) -> tuple[PostgresDriver, CountingExecutor]:
    """A Postgres driver on the test's clock and database whose statements are counted."""
    executor = CountingExecutor(env.driver.executor)
    return PostgresDriver(clock=env.clock, executor=executor), executor


@pytest.fixture
def pg(db: None) -> Iterator[PgEnv]:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        yield env


@pytest.fixture
def pg_committed(transactional_db: None) -> Iterator[PgEnv]:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        yield env


@pytest.fixture
def tick(pg: PgEnv) -> JobHandle[Any, Any]:
    return declare_tick()


def declare_tick(queue: str = "default", name: str = "record_tick") -> JobHandle[Any, Any]:
    def body(run: JobRun[Any]) -> None:
        return None

    body.__name__ = name
    return job(idempotency_key=lambda i: f"{i['task']}:{i['occurrence_ms']}", tenant="none", queue=queue)(body)


def every(tick: JobHandle[Any, Any], cron: str = "0 * * * *", *, name: str = "hourly", **options: Any) -> TaskHandle:
    def body(occurrence_ms: int) -> list[tuple[JobHandle[Any, Any], Any]]:
        return [(tick, {"task": name, "occurrence_ms": occurrence_ms})]

    body.__name__ = name
    return task(cron=cron, tz=options.pop("tz", "UTC"), **options)(body)


def query(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description is not None else []


def fired_rows(name: str) -> list[int]:
    """One int per job row of task ``name``, sorted; the test fails when an occurrence has two rows."""
    rows = query(
        "SELECT (input->>'occurrence_ms')::bigint, count(*) FROM x_jobs WHERE input->>'task' = %s "
        "GROUP BY 1 ORDER BY 1",
        [name],
    )
    assert all(count == 1 for _, count in rows), f"an occurrence fired twice: {rows}"
    return [occurrence for occurrence, _ in rows]


def durable(env: PgEnv, *, holder: str = "a", ttl: str = "30s") -> dict[str, Any]:
    """A named holder of the driver's lease (the driver's watermarks are the default state)."""
    return {"leader": lease_leader(env.driver, holder=holder, ttl=ttl, clock=env.clock)}


# -- the statements ----------------------------------------------------------------------------


def test_the_lease_is_taken_renewed_refused_taken_over_and_released(pg: PgEnv) -> None:
    a = lease_leader(pg.driver, holder="a", ttl="30s", clock=pg.clock)
    b = lease_leader(pg.driver, holder="b", ttl="30s", clock=pg.clock)
    assert (a.renew_every_ms, a.durable) == (10_000, True)
    assert a.acquire() and a.term == 1
    assert not b.acquire() and b.term == 0
    pg.clock.advance(10 * SECOND)
    assert a.acquire() and a.term == 1  # a renewal keeps the term
    pg.clock.advance(30 * SECOND - 1)
    assert not b.acquire()  # A's renewed lease is still live
    pg.clock.advance(1)
    assert b.acquire() and b.term == 1  # lapsed: B takes over
    assert not a.acquire()  # the demoted node finds out at its next ask
    a.release()  # A's release cannot drop B's lease
    assert query("SELECT holder FROM x_job_scheduler_leases") == [("b",)]
    b.release()
    assert query("SELECT count(*) FROM x_job_scheduler_leases") == [(0,)]
    assert a.acquire() and a.term == 2  # taken again after losing it: a new term
    pg.clock.advance(31 * SECOND)
    assert a.acquire() and a.term == 3  # its own lapsed lease re-taken: a new term too (watermarks reloaded)


def test_load_arms_a_task_once_and_reads_it_back(pg: PgEnv) -> None:
    state = pg.driver.scheduler_state
    start = pg.clock.now_ms()
    assert state.load(["a", "b"], now_ms=start) == {"a": start, "b": start}
    assert state.load(["a", "b", "c"], now_ms=start + 5) == {"a": start, "b": start, "c": start + 5}
    assert state.load([], now_ms=start) == {}
    assert pg.driver.operator.task_fires() == []  # arming is not a fire
    rows = pg.driver.executor.query(scheduler_sql.SQL_SCHEDULER_WATERMARKS, {"tasks": ["a", "zz"]})
    assert rows == [("a", start)]


def test_the_fire_moves_the_watermark_inserts_and_records_in_one_statement(
    pg: PgEnv, tick: JobHandle[Any, Any]
) -> None:
    driver, executor = counting(pg)
    state = driver.scheduler_state
    start = pg.clock.now_ms()
    state.load(["hourly"], now_ms=start)
    occurrence = start + HOUR
    requests = [tick.build_request({"task": "hourly", "occurrence_ms": occurrence})]
    executor.statements = 0
    fire = Fire("hourly", start, occurrence, occurrence, requests, occurrence)
    result = state.fire(fire)
    assert (result.outcome, result.inserted, executor.statements) == ("fired", 1, 1)
    assert fired_rows("hourly") == [occurrence]
    assert [(f.task, f.occurrence_ms, f.fired_at_ms) for f in pg.driver.operator.task_fires()] == [
        ("hourly", occurrence, occurrence)
    ]
    assert state.load(["hourly"], now_ms=0) == {"hourly": occurrence}

    again = state.fire(fire)  # a second scheduler that read the same watermark
    assert (again.outcome, again.inserted) == ("fenced", 0)
    assert fired_rows("hourly") == [occurrence]

    pg.driver.operator.pause_task("hourly")
    later = start + 2 * HOUR
    paused = state.fire(
        Fire(
            "hourly", occurrence, later, later, [tick.build_request({"task": "hourly", "occurrence_ms": later})], later
        ),
    )
    assert paused.outcome == "paused"
    assert state.load(["hourly"], now_ms=0) == {"hourly": occurrence} and fired_rows("hourly") == [occurrence]

    pg.driver.operator.resume_task("hourly")
    held = pg.driver.enqueue(tick.build_request({"task": "hourly", "occurrence_ms": later}))  # the live key is held
    deduped = state.fire(
        Fire(
            "hourly", occurrence, later, later, [tick.build_request({"task": "hourly", "occurrence_ms": later})], later
        ),
    )
    assert (deduped.outcome, deduped.inserted) == ("fired", 0)  # inserts nothing under a live key
    assert query("SELECT id::text FROM x_jobs WHERE idempotency_key = %s", [f"hourly:{later}"]) == [(held.id,)]

    taken = str(query("SELECT id FROM x_jobs LIMIT 1")[0][0])
    same_id = state.fire(
        Fire("hourly", later, later + HOUR, later + HOUR, [request(key="fresh", id=taken)], later + HOUR),
    )
    assert (same_id.outcome, same_id.inserted) == ("fired", 0)  # nor under an id that names a row


# -- the wake ----------------------------------------------------------------------------------


@pytest.fixture
def announced() -> Iterator[Callable[[Callable[[], object]], list[str]]]:
    with psycopg.connect(conninfo_for(connection.settings_dict), autocommit=True) as listener:
        listener.execute(f"LISTEN {WAKE_CHANNEL}")

        def read() -> list[str]:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [WAKE_CHANNEL, SENTINEL])
            heard: list[str] = []
            for note in listener.notifies(timeout=WAIT):
                if note.payload == SENTINEL:
                    return heard
                heard.append(note.payload)
            raise AssertionError(f"the sentinel never arrived; heard {heard}")

        def run(fn: Callable[[], object]) -> list[str]:
            read()
            fn()
            return read()

        yield run


def test_the_fire_announces_each_queue_it_filled_once_and_a_refused_fire_nothing(
    pg_committed: PgEnv, announced: Callable[[Callable[[], object]], list[str]]
) -> None:
    a, b = declare_tick("q-a", "tick_a"), declare_tick("q-b", "tick_b")
    state = pg_committed.driver.scheduler_state
    start = pg_committed.clock.now_ms()
    state.load(["fan"], now_ms=start)
    occ = start + HOUR
    requests = [
        a.build_request({"task": "fan", "occurrence_ms": occ}),
        a.build_request({"task": "fan-2", "occurrence_ms": occ}),
        b.build_request({"task": "fan", "occurrence_ms": occ}),
    ]
    fire = Fire("fan", start, occ, occ, requests, occ)
    assert sorted(announced(lambda: state.fire(fire))) == ["q-a", "q-b"]
    assert announced(lambda: state.fire(fire)) == []  # fenced


# -- catch-up across a redeploy ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "first_round", "expected_hours"),
    [("skip", 1, [24]), ("run-once", 1, [1]), ("run-all", 10, list(range(1, 25)))],
)
def test_a_redeployed_scheduler_catches_up_a_day_from_the_stored_watermark(
    pg: PgEnv, tick: JobHandle[Any, Any], policy: str, first_round: int, expected_hours: list[int]
) -> None:
    start = pg.clock.now_ms()
    hourly = every(tick, catch_up=policy)
    before = job_scheduler(driver=pg.driver, tasks=[hourly], clock=pg.clock, **durable(pg, holder="old"))
    before.start(loop=False)
    before.run_once()
    before.stop()
    pg.clock.advance(DAY + 30 * 60_000)
    after = job_scheduler(driver=pg.driver, tasks=[hourly], clock=pg.clock, **durable(pg, holder="new"))
    after.start(loop=False)
    assert after.run_once() == first_round
    while after.run_once():
        pass
    assert fired_rows("hourly") == [start + h * HOUR for h in expected_hours]
    stored = query("SELECT (extract(epoch from watermark) * 1000)::bigint FROM x_job_task_watermarks")
    assert stored == [(start + DAY,)]


# -- two schedulers ----------------------------------------------------------------------------


@pytest.mark.slow
def test_two_schedulers_over_many_rounds_fire_every_occurrence_exactly_once(
    pg: PgEnv, tick: JobHandle[Any, Any]
) -> None:
    start = pg.clock.now_ms()
    minutely = every(tick, "* * * * *", name="minutely", catch_up="run-all", max_catch_up=100)

    def build(holder: str) -> Any:
        sched = job_scheduler(driver=pg.driver, tasks=[minutely], clock=pg.clock, **durable(pg, holder=holder))
        sched.start(loop=False)
        return sched

    a, b = build("a"), build("b")
    everyone = [a, b]
    for second in range(0, 3 * 3600, 5):  # three hours, both ticking every 5 s
        pg.clock.advance(5 * SECOND)
        if second == 5400:  # A comes back as a new process after half an hour gone
            a = build("a-restarted")
            everyone.append(a)
        if not 3600 <= second < 5400:  # killed at 1 h: no release, its lease lapses on its own
            a.run_once()
        b.run_once()
    assert [s.stats.fires for s in everyone] == [60, 120, 0]  # A led, then B from the takeover on
    assert everyone[1].stats.terms == 1 and everyone[2].stats.fenced == 0
    assert fired_rows("minutely") == [start + m * 60_000 for m in range(1, 181)]


def test_two_concurrent_leaders_on_one_database_fire_each_occurrence_once(pg_committed: PgEnv) -> None:
    tick = declare_tick()
    minutely = every(tick, "* * * * *", name="raced")
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []
    scheds = [
        job_scheduler(
            driver=pg_committed.driver,
            tasks=[minutely],
            clock=pg_committed.clock,
            leader=MemoryLeader(),  # both believe they lead: only the watermark fence stands between them
        )
        for _ in range(2)
    ]
    rounds = 30

    def racer(sched: Any) -> None:
        try:
            sched.start(loop=False)
            for _ in range(rounds + 1):
                barrier.wait(WAIT)
                sched.run_once()
                barrier.wait(WAIT)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=racer, args=(s,), daemon=True) for s in scheds]
    for thread in threads:
        thread.start()
    start = pg_committed.clock.now_ms()
    for index in range(rounds + 1):
        barrier.wait(WAIT)  # both run a round at once
        barrier.wait(WAIT)
        if index < rounds:
            pg_committed.clock.advance(60 * SECOND)
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors
    assert fired_rows("raced") == [start + m * 60_000 for m in range(1, rounds + 1)]
    assert sum(s.stats.fenced for s in scheds) >= 1  # they did collide, and the fence refused


# -- the rollup rides on a renewal -------------------------------------------------------------


def _counters(name: str) -> list[tuple[int, int, int, int]]:
    rows = query(
        "SELECT (extract(epoch from bucket) * 1000)::bigint, width_ms, done, duration_ms FROM x_job_counters "
        "WHERE job = %s ORDER BY bucket, width_ms",
        [name],
    )
    return [(int(a), int(b), int(c), int(d)) for a, b, c, d in rows]


def _settle_and_fold(
    driver: JobDriver, clock: FrozenClock, fold: Callable[[], object], *, every_days: int
) -> list[Any]:
    snapshots = []
    for step in range(40):
        for _ in range(step % 3 + 1):
            settle_done(driver, "rollup.month", duration_ms=step)
            clock.advance(37_000)
        clock.advance(DAY - 23 * 60_000 + step * 61_000)
        if step % every_days == 0:
            fold()
            snapshots.append(_counters("rollup.month"))
    return snapshots


@pytest.mark.slow
@pytest.mark.parametrize("every_days", [1, 9])
def test_the_rollup_in_the_renewal_folds_exactly_as_rollup_counters(pg: PgEnv, every_days: int) -> None:
    clock_a = FrozenClock()
    driver_a = PostgresDriver(clock=clock_a)
    expected = _settle_and_fold(driver_a, clock_a, driver_a.rollup_counters, every_days=every_days)
    query("DELETE FROM x_job_counters")
    query("DELETE FROM x_jobs")
    clock_b = FrozenClock()
    driver_b = PostgresDriver(clock=clock_b)
    leader = lease_leader(driver_b, holder="roller", clock=clock_b)

    def fold() -> bool:
        return leader.acquire(rollup=True)

    assert _settle_and_fold(driver_b, clock_b, fold, every_days=every_days) == expected
    assert {w for snap in expected for _, w, _, _ in snap} == {w for w, _ in COUNTER_TIERS}

    settle_done(driver_b, "rollup.fenced")
    clock_b.advance(2 * DAY)
    query("DELETE FROM x_job_scheduler_leases")
    assert lease_leader(driver_b, holder="other", clock=clock_b).acquire()
    before = _counters("rollup.fenced")
    assert leader.acquire(rollup=True) is False  # no lease, no rollup
    assert _counters("rollup.fenced") == before


def test_an_idle_minute_with_35_tasks_is_6_statements_the_rollup_included(pg: PgEnv, tick: JobHandle[Any, Any]) -> None:
    tasks = [every(tick, "0 3 1 7 *", name=f"yearly-{i}") for i in range(35)]  # nothing due for months
    driver, executor = counting(pg)
    sched = job_scheduler(driver=driver, tasks=tasks, clock=pg.clock)  # the driver's own lease and watermarks
    sched.start(loop=False)
    settle_done(pg.driver, "old.counter")  # a 1-minute bucket the rollup will fold after 24 h
    sched.run_once()
    assert executor.statements == 2  # the first ask (carrying the rollup) and the one load
    pg.clock.advance(DAY)
    sched.run_once()
    executor.statements = 0
    for _ in range(600):  # ten idle minutes, a round a second
        pg.clock.advance(SECOND)
        sched.run_once()
    assert executor.statements == 60, "6 lease renewals a minute, nothing else"
    assert sched.stats.fires == 0 and sched.stats.rollups == 12
    assert {w for _, w, _, _ in _counters("old.counter")} == {300_000}  # folded by a renewal


# -- durable or refused ------------------------------------------------------------------------


def test_run_refuses_a_leader_or_state_that_dies_with_the_process_against_postgres(pg: PgEnv) -> None:
    sched = job_scheduler(driver=pg.driver, tasks=[], leader=MemoryLeader())
    with pytest.raises(InvariantError) as caught:
        sched.run(install_signals=False)
    assert caught.value.code == "X_INVARIANT"
    assert "leave leader= and state= to job_scheduler()" in caught.value.message
    assert sched.state == "idle"  # refused before it started
    in_memory = MemoryDriver(clock=pg.clock).scheduler_state
    half = job_scheduler(driver=pg.driver, tasks=[], state=in_memory)
    with pytest.raises(InvariantError):
        half.check_durable()
    job_scheduler(driver=pg.driver, tasks=[]).check_durable()  # the defaults: the driver's lease and watermarks


def test_the_command_refuses_an_in_memory_leader_against_postgres(pg: PgEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    from ultimate_jobs.management.commands import jobs_scheduler as command

    built = job_scheduler(driver=pg.driver, tasks=[], leader=MemoryLeader())
    monkeypatch.setattr(command, "scheduler_from_settings", lambda **_: built)
    with pytest.raises(CommandError) as caught:  # exit 1 with the code, as on the command line
        call_command("jobs_scheduler")
    assert caught.value.returncode == 1 and isinstance(caught.value.__cause__, InvariantError)


def test_scheduler_from_settings_builds_on_the_drivers_own_lease_and_watermarks(pg: PgEnv) -> None:
    built = scheduler_from_settings(lease_ttl="6s", tick_interval="250ms", drain_deadline="5s")
    assert isinstance(built.leader, LeaseLeader) and built.leader.store is pg.driver.leader
    assert built.store is pg.driver.scheduler_state and built.leader.durable and built.store.durable
    assert (built.leader.ttl_ms, built.tick_interval_ms, built.drain_deadline_ms) == (6_000, 250, 5_000)
    built.check_durable()
