"""The Postgres event bus: one clock (the database's), publish / find / expiry / purge, the purge target,
a worker whose clock runs a minute ahead, a timeout decided only after the bus was asked once more,
and the bus a process on the Postgres driver gets by default."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings

from tests.conftest import JobsEnv, installed
from tests.helpers import eventually
from ultimate_jobs import JobRun, events_purge_target, job, postgres_event_bus, publish_event
from ultimate_jobs.contracts.jobs import StepRecord
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.events import PostgresEventBus
from ultimate_jobs.drivers.postgres.executor import django_executor
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.events import EventRecord, event_bus, reset_event_bus, set_event_bus
from ultimate_jobs.features.purge import EVENTS_PURGE_TARGET
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

MINUTE = 60_000


@pytest.fixture
def bus(db: None) -> PostgresEventBus:
    return postgres_event_bus(django_executor("default"))  # type: ignore[return-value]


def db_now_ms() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint")
        return int(cursor.fetchone()[0])  # type: ignore[index]


def test_the_x_job_events_table_and_its_indexes_exist(db: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'x_job_events' ORDER BY indexname")
        names = [row[0] for row in cursor.fetchall()]
    assert names == ["x_job_events_event_idx", "x_job_events_expires_idx", "x_job_events_pkey"]


def test_publish_and_now_read_the_database_clock_and_find_matches_after_a_stamp(bus: PostgresEventBus) -> None:
    before = bus.now()
    assert abs(before - db_now_ms()) < 5_000
    published = bus.publish("order.paid", {"order_id": "o-1", "meta": {"currency": "EUR", "fx": 1}}, ttl="1h")
    after = bus.now()
    assert before <= published.published_at_ms <= after
    assert published.expires_at_ms == published.published_at_ms + 3_600_000
    assert published.data == {"order_id": "o-1", "meta": {"currency": "EUR", "fx": 1}}

    found = bus.find("order.paid", {"order_id": "o-1", "meta": {"currency": "EUR"}}, since_ms=before)
    assert found == published
    assert bus.find("order.paid", None, since_ms=before) == published
    assert bus.find("order.paid", {"order_id": "o-2"}, since_ms=before) is None
    assert bus.find("order.refunded", None, since_ms=before) is None
    assert bus.find("order.paid", None, since_ms=published.published_at_ms + 1) is None  # published before


def test_the_oldest_match_is_answered(bus: PostgresEventBus) -> None:
    since = bus.now()
    first = bus.publish("tick", {"n": 1})
    bus.publish("tick", {"n": 2})
    assert bus.find("tick", None, since_ms=since) == first


def test_expired_events_do_not_match_and_purge_answers_the_rows_removed(bus: PostgresEventBus) -> None:
    since = bus.now()
    with connection.cursor() as cursor:  # two events that expired a minute ago, by the database clock
        cursor.execute(
            "INSERT INTO x_job_events (id, event, data, published_at, expires_at) "
            "SELECT gen_random_uuid(), 'gone', '{}', clock_timestamp(), clock_timestamp() - interval '1 minute' "
            "FROM generate_series(1, 2)"
        )
    kept = bus.publish("kept", {}, ttl="1h")
    assert bus.find("gone", None, since_ms=since) is None
    target = events_purge_target(bus)
    assert target.name == EVENTS_PURGE_TARGET == "x_job_events"
    assert target.purge_expired(0) == 2  # the caller's now is not used: the bus has its own clock
    assert bus.purge_expired() == 0
    assert bus.find("kept", None, since_ms=since) == kept


def test_publish_refuses_a_bad_name_ttl_or_data(bus: PostgresEventBus) -> None:
    for name, ttl in (("", "1h"), ("x", 0), ("x", "-1s"), ("x", "soon")):
        with pytest.raises(UltimateError) as caught:
            bus.publish(name, {}, ttl=ttl)
        assert caught.value.code == "X_INVARIANT"
    for data in ({"amount": float("nan")}, {"at": object()}):
        with pytest.raises(UltimateError) as refused:
            bus.publish("x", data)
        assert refused.value.code == "X_INVARIANT"


def test_a_publish_inside_a_transaction_commits_with_it(bus: PostgresEventBus) -> None:
    since = bus.now()
    with pytest.raises(RuntimeError), transaction.atomic():
        bus.publish("rolled.back", {})
        raise RuntimeError("the business transaction fails")
    assert bus.find("rolled.back", None, since_ms=since) is None


# -- the wait, on the bus clock ----------------------------------------------------------------


@pytest.fixture
def ahead(bus: PostgresEventBus) -> Iterator[JobsEnv]:
    """A memory queue whose worker clock runs a minute AHEAD of the database, with the Postgres bus."""
    clock = FrozenClock(start_ms=bus.now() + MINUTE)
    with installed(clock, MemoryDriver(clock=clock)) as env:
        set_event_bus(bus)
        yield env


def waiting(timeout: str = "10m", required: bool = False) -> Any:
    @job(idempotency_key=lambda i: i["order_id"], tenant="none", event_poll="5s", retry={"attempts": 1})
    def await_payment(run: JobRun[Any]) -> Any:
        return run.step.wait_for_event(
            "paid", "order.paid", match={"order_id": run.input["order_id"]}, timeout=timeout, required=required
        )

    return await_payment


def test_a_worker_a_minute_ahead_of_the_database_matches_an_event_published_after_its_wait(
    ahead: JobsEnv, bus: PostgresEventBus
) -> None:
    queued = waiting().enqueue({"order_id": "o-1"})
    first = run_jobs(clock=ahead.clock, advance=False)
    assert [e.outcome for e in first.executions] == ["suspended"]
    step: StepRecord = ahead.driver.operator.steps(queued.id)[0]
    assert step.meta["since_ms"] <= bus.now() < ahead.clock.now_ms()  # stamped on the bus clock, not ours

    published = publish_event("order.paid", {"order_id": "o-1", "amount": 7})
    assert published.published_at_ms < ahead.clock.now_ms()  # "before" the wait, by the worker's own clock
    ahead.clock.advance(5_000)
    resumed = run_jobs(clock=ahead.clock, advance=False)
    assert [e.outcome for e in resumed.executions] == ["completed"]
    assert resumed.executions[0].result == {"order_id": "o-1", "amount": 7}


class Recording(PostgresEventBus):
    """The Postgres bus, logging each call with what the bus clock said."""

    def __init__(self, inner: PostgresEventBus) -> None:
        super().__init__(inner.executor)
        self.calls: list[tuple[str, int]] = []

    def now(self) -> int:
        value = super().now()
        self.calls.append(("now", value))
        return value

    def find(self, event: str, match: Any, *, since_ms: int) -> EventRecord | None:
        self.calls.append(("find", since_ms))
        return super().find(event, match, since_ms=since_ms)


def test_a_timed_out_wait_is_x_job_timeout_only_after_the_bus_was_asked_once_more(
    ahead: JobsEnv, bus: PostgresEventBus
) -> None:
    recording = Recording(bus)
    set_event_bus(recording)
    queued = waiting(timeout="100ms", required=True).enqueue({"order_id": "o-late"})
    run_jobs(clock=ahead.clock, advance=False)
    deadline = int(ahead.driver.operator.steps(queued.id)[0].meta["deadline_ms"])
    eventually(lambda: bus.now() >= deadline)  # the deadline passes on the DATABASE clock
    recording.calls.clear()
    ahead.clock.advance(5_000)
    done = run_jobs(clock=ahead.clock, advance=False).last(queued.id)
    assert done is not None and done.code == "X_JOB_TIMEOUT" and done.outcome == "dead-lettered"
    kinds = [kind for kind, _ in recording.calls]
    assert kinds == ["now", "find"]  # the clock showed the deadline passed, THEN the bus was asked
    assert recording.calls[0][1] >= deadline


def test_an_answer_published_before_the_deadline_still_counts_on_the_last_poll(
    ahead: JobsEnv, bus: PostgresEventBus
) -> None:
    queued = waiting(timeout="100ms", required=True).enqueue({"order_id": "o-just-in-time"})
    run_jobs(clock=ahead.clock, advance=False)
    publish_event("order.paid", {"order_id": "o-just-in-time"})
    deadline = int(ahead.driver.operator.steps(queued.id)[0].meta["deadline_ms"])
    eventually(lambda: bus.now() >= deadline)
    ahead.clock.advance(5_000)
    done = run_jobs(clock=ahead.clock, advance=False).last(queued.id)
    assert done is not None and done.outcome == "completed"


# -- the default bus ---------------------------------------------------------------------------


def test_a_process_on_the_postgres_driver_gets_the_postgres_bus_by_default(db: None) -> None:
    try:
        with override_settings(ULTIMATE_JOBS={"DRIVER": "postgres"}):
            reset_event_bus()
            assert isinstance(event_bus(), PostgresEventBus)
        with override_settings(ULTIMATE_JOBS={"DRIVER": "memory"}):
            reset_event_bus()
            assert not isinstance(event_bus(), PostgresEventBus)
        with override_settings(ULTIMATE_JOBS={"DRIVER": "nonsense"}):
            reset_event_bus()
            assert not isinstance(event_bus(), PostgresEventBus)  # the system check reports the setting
    finally:
        reset_event_bus()
