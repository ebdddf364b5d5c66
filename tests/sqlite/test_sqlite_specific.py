"""What only the SQLite driver has: the file in WAL mode, the live idempotency key as a partial unique
index, claims that never hand one row to two claimers, a fair claim's read of one org's rows through its
own index where no ANALYZE has run, the in-process wake, the default driver and event
bus on an SQLite database, and row security's message."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import override_settings

from tests.readme import documented_tables
from ultimate_jobs.conf import build_driver, jobs_settings
from ultimate_jobs.contracts.jobs import EnqueueRequest, NackOptions
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.drivers.sqlite.events import SqliteEventBus, sqlite_event_bus
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.events import event_bus, reset_event_bus
from ultimate_jobs.guards.row_security import check_row_security
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance import claim, enqueue_finished, request

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def driver() -> Iterator[SqliteDriver]:
    built = SqliteDriver(clock=FrozenClock())
    yield built
    built.close()


def test_the_file_runs_in_wal_mode(driver: SqliteDriver) -> None:
    driver.stats()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


def test_the_live_key_is_a_partial_unique_index_that_frees_the_key_when_the_row_finishes(driver: SqliteDriver) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'x_jobs_name_tenant_idempotency_live_idx'")
        (ddl,) = cursor.fetchone()
    assert (
        ddl.startswith("CREATE UNIQUE INDEX")
        and "WHERE \"state\" IN ('ready', 'delayed', 'running', 'suspended')" in ddl
    )
    first = driver.enqueue(request(key="k"))
    assert driver.enqueue(request(key="k")) == type(first)(first.id, first.run_id, True)
    driver.operator.cancel(first.id)
    second = driver.enqueue(request(key="k"))
    assert second.id != first.id and not second.deduped


def test_a_fair_claim_reads_one_orgs_rows_through_their_index_without_statistics(driver: SqliteDriver) -> None:
    """SQLite's default is no ANALYZE: its planner then took the (queue, lane, run_at) index and sorted every
    due row of a busy org on each claim. The lane's read names x_jobs_lane_idx, which walks them in claim
    order and stops at the org's share."""
    from ultimate_jobs.drivers.sqlite.queries.fairness import SQL_LANE_DUE

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'")
        assert cursor.fetchone()[0] == 0
        cursor.execute("EXPLAIN QUERY PLAN " + SQL_LANE_DUE, {"queue": "q", "lane": "org-a", "now": 0, "share": 10})
        plan = " / ".join(str(row[-1]) for row in cursor.fetchall())
    assert "USING INDEX x_jobs_lane_idx" in plan and "TEMP B-TREE" not in plan, plan


def test_concurrent_claimers_never_take_one_row_twice() -> None:
    """Four threads, each on its own connection to the file, claim 300 rows in small batches: every row is
    handed out exactly once (BEGIN IMMEDIATE serialises the claims)."""
    driver = SqliteDriver()
    ids = {e.id for e in driver.enqueue_many([request(key=f"k{i}") for i in range(300)])}
    taken: list[str] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        try:
            while True:
                got = driver.claim(queues=["conformance"], limit=7, worker_id=f"w{n}").jobs
                if not got:
                    return
                with lock:
                    taken.extend(job.id for job in got)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(taken) == sorted(ids)


def test_a_claim_inside_the_callers_transaction_joins_it(driver: SqliteDriver) -> None:
    driver.enqueue(request())
    with pytest.raises(RuntimeError), transaction.atomic():
        assert len(claim(driver, limit=5)) == 1
        raise RuntimeError("roll the claim back")
    assert [job.attempt for job in claim(driver, limit=5)] == [1]  # the rolled-back claim spent nothing


def test_an_enqueue_in_this_process_wakes_its_subscriber_once_per_due_queue() -> None:
    driver = SqliteDriver(clock=FrozenClock(), watch_interval_ms=None)  # the in-process wake alone
    heard: list[str] = []
    unsubscribe = driver.subscribe(heard.append)
    driver.enqueue_many([request(queue="b", key="1"), request(queue="a", key="2"), request(queue="a", key="3")])
    assert heard == ["b", "a"]
    heard.clear()
    driver.enqueue(request(queue="later", key="4", run_at_ms=driver.clock.now_ms() + 60_000))
    driver.enqueue(request(queue="b", key="1"))  # deduped: no new row
    assert heard == []
    (job,) = claim(driver, queues=["a"], limit=1)
    driver.nack(job.id, job.ref, NackOptions(error="retry now"))
    assert heard == ["a"]
    with transaction.atomic():  # inside the caller's transaction the wake waits for the commit
        driver.enqueue(request(queue="c", key="5"))
        assert heard == ["a"]
    assert heard == ["a", "c"]
    unsubscribe()
    driver.enqueue(request(queue="d", key="6"))
    assert heard == ["a", "c"]
    assert driver.wake_is_live() is False  # no watch: the worker keeps its 2 s idle ceiling


def test_an_unset_driver_on_sqlite_builds_the_sqlite_driver_and_jobs_driver_says_so() -> None:
    with override_settings(ULTIMATE_JOBS={}):
        assert jobs_settings().driver == "sqlite"
        assert isinstance(build_driver(), SqliteDriver)
        out = io.StringIO()
        call_command("jobs", "driver", stdout=out)
    assert out.getvalue() == "driver 'sqlite' (DRIVER unset; DATABASES['default'] is sqlite)\n"


def test_the_event_bus_on_sqlite_publishes_finds_expires_and_purges() -> None:
    clock = FrozenClock()
    bus = SqliteEventBus(sqlite_event_bus().executor, clock=clock)
    since = bus.now()
    published = bus.publish("order.paid", {"order_id": "o-1", "meta": {"currency": "EUR", "fx": 1}}, ttl="1h")
    bus.publish("order.paid", {"order_id": "o-2"}, ttl="2h")
    assert published.expires_at_ms == published.published_at_ms + 3_600_000
    assert bus.find("order.paid", {"meta": {"currency": "EUR"}}, since_ms=since) == published
    assert bus.find("order.paid", {"order_id": "o-2"}, since_ms=since).data == {"order_id": "o-2"}  # type: ignore[union-attr]
    assert bus.find("order.paid", {"order_id": "o-3"}, since_ms=since) is None
    assert bus.find("order.paid", None, since_ms=since + 1) is None
    clock.advance(3_600_000)
    assert bus.find("order.paid", {"order_id": "o-1"}, since_ms=since) is None  # expired
    assert bus.purge_expired() == 1
    clock.advance(3_600_000)
    assert bus.purge_expired() == 1


def test_a_process_on_the_sqlite_driver_gets_the_sqlite_event_bus() -> None:
    reset_event_bus()
    try:
        with override_settings(ULTIMATE_JOBS={}):
            assert isinstance(event_bus(), SqliteEventBus)
    finally:
        reset_event_bus()


def test_row_security_is_a_no_op_on_sqlite_and_the_check_says_so() -> None:
    assert check_row_security() == []  # asked for no database: a database check says nothing
    (message,) = check_row_security(databases=["default"])
    assert message.id == "ultimate_jobs.X_TENANCY_ROW_SECURITY_UNAVAILABLE"
    assert "'default' is sqlite" in message.msg and "only the Python guard" in message.msg


def test_a_finished_row_is_requeued_and_its_queue_announced() -> None:
    driver = SqliteDriver(clock=FrozenClock(), watch_interval_ms=None)
    done = enqueue_finished(driver, request())
    heard: list[str] = []
    driver.subscribe(heard.append)
    assert driver.operator.requeue(done).state == "ready"
    assert heard == ["conformance"]


def test_enqueue_request_ids_in_any_spelling_name_one_row(driver: SqliteDriver) -> None:
    first = driver.enqueue(
        EnqueueRequest("conformance.job", "conformance", {}, "k", None, 3, id="0190C1A2-0000-7000-8000-000000000001")
    )
    assert first.id == "0190c1a2-0000-7000-8000-000000000001"
    assert driver.operator.get("0190c1a2000070008000000000000001") is not None


def test_a_request_id_that_is_no_uuid_is_refused_before_any_row(driver: SqliteDriver) -> None:
    bad = EnqueueRequest("conformance.job", "conformance", {}, "k", None, 3, id="job-1")
    with pytest.raises(UltimateError) as caught:
        driver.enqueue_many([request(key="ok"), bad])
    assert caught.value.code == "X_INVARIANT" and "must be UUIDs" in caught.value.message
    assert driver.stats() == []


def test_the_migrations_build_0008s_index_plainly_on_sqlite() -> None:
    out = io.StringIO()
    call_command("sqlmigrate", "ultimate_jobs", "0008", stdout=out)
    statements = [line for line in out.getvalue().splitlines() if line.startswith("CREATE")]
    assert [s.split(" ON ")[0] for s in statements] == ['CREATE INDEX "x_outbox_published_idx"']


def test_0009_drops_the_earlier_indexes_plainly_and_only_where_they_exist_on_sqlite() -> None:
    out = io.StringIO()
    call_command("sqlmigrate", "ultimate_jobs", "0009", stdout=out)
    statements = [line for line in out.getvalue().splitlines() if line and not line.startswith("--")]
    assert statements == [
        'DROP INDEX IF EXISTS "x_jobs_live_queue_idx";',
        'DROP INDEX IF EXISTS "x_jobs_finished_idx";',
    ]


def test_the_readme_lists_every_table_migrate_creates_on_sqlite() -> None:
    with connection.cursor() as cursor:
        migrated = sorted(t for t in connection.introspection.table_names(cursor) if t.startswith("x_"))
    assert sorted(documented_tables()) == migrated


def test_under_debug_every_statement_shows_in_the_connections_queries(driver: SqliteDriver) -> None:
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        driver.enqueue(request(key="seen"))
        (job,) = claim(driver, limit=1)
        assert driver.ack(job.id, job.ref)
    statements = [q["sql"] for q in captured.captured_queries]
    assert any(s.startswith("INSERT INTO x_jobs") for s in statements)
    assert any("UPDATE x_jobs AS j\nSET state = 'running'" in s for s in statements)
    assert any("SET state = 'done'" in s for s in statements)


def test_a_rate_take_that_waited_for_the_write_lock_hands_out_no_instant_before_it_held_it(
    driver: SqliteDriver,
) -> None:
    """A take asked at ``now_ms`` whose ``BEGIN IMMEDIATE`` waited behind other writers decides at the time it
    holds the lock (the driver's clock): the key's free instant that passed meanwhile is not handed out — the run
    would start late, closer to the next start than the interval — and the answer still counts from ``now_ms``."""
    rates = driver.rates
    assert rates is not None and isinstance(driver.clock, FrozenClock)
    asked = driver.clock.now_ms()
    assert rates.take("api", "job-1", interval_ms=20, now_ms=asked) == 0  # the key's next instant: asked + 20
    driver.clock.advance(35)  # the next take's lock was held by others for 35 ms
    assert rates.take("api", "job-2", interval_ms=20, now_ms=asked + 5, near_ms=250) == 30  # at asked + 35, not + 20
    assert rates.take("api", "job-3", interval_ms=20, now_ms=asked + 35, near_ms=250) == 20  # spaced from it
