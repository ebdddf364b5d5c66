"""What only the Postgres operator surface has, beside the conformance suite: the wake its statements
announce, the live-key race a requeue can lose to a concurrent enqueue, ids that are not UUIDs, and the
counter rollup checked against the memory driver over a month of folds."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from tests.helpers import eventually
from ultimate_jobs.contracts.jobs import ClaimRef, Progress
from ultimate_jobs.contracts.operator import BulkFilter, BulkResult, JobFilter
from ultimate_jobs.contracts.series import COUNTER_TIERS
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.operator import PostgresOperatorStore
from ultimate_jobs.drivers.postgres.queries.jobs import WAKE_CHANNEL
from ultimate_jobs.drivers.postgres.wake import conninfo_for
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance import (
    JOB,
    QUEUE,
    claim_one,
    enqueue_finished,
    fixed_id,
    raises_code,
    record,
    request,
    settle_done,
)

pytestmark = [pytest.mark.postgres]

WAIT = 5.0  # the bound on every cross-connection wait; a passing test never spends it
SENTINEL = "test-sentinel"


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def driver(clock: FrozenClock) -> PostgresDriver:
    return PostgresDriver(clock=clock)


@pytest.fixture
def operator_store(driver: PostgresDriver) -> PostgresOperatorStore:
    surface = driver.operator
    assert isinstance(surface, PostgresOperatorStore)
    return surface


@pytest.fixture
def conninfo() -> str:
    return conninfo_for(connection.settings_dict)


@pytest.fixture
def admin(conninfo: str) -> Iterator[psycopg.Connection[Any]]:
    """Another session, autocommit: it watches locks."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        yield conn


# -- the wake ----------------------------------------------------------------------------------------


@pytest.fixture
def announced(conninfo: str) -> Iterator[Callable[[Callable[[], object]], list[str]]]:
    """``announced(fn)``: the payloads on x_jobs_wake that ``fn``'s statements sent, in order (read up
    to a sentinel notified after ``fn`` on the same connection, so nothing is missed or waited out)."""
    with psycopg.connect(conninfo, autocommit=True) as listener:
        listener.execute(f"LISTEN {WAKE_CHANNEL}")

        def run(fn: Callable[[], object]) -> list[str]:
            read()  # what earlier statements (an enqueue's own wake) sent is not fn's
            fn()
            return read()

        def read() -> list[str]:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [WAKE_CHANNEL, SENTINEL])
            heard: list[str] = []
            for note in listener.notifies(timeout=WAIT):
                if note.payload == SENTINEL:
                    return heard
                heard.append(note.payload)
            raise AssertionError(f"the sentinel never arrived; heard {heard}")

        yield run


@pytest.mark.django_db(transaction=True)
def test_operator_statements_announce_their_queue(
    driver: PostgresDriver,
    operator_store: PostgresOperatorStore,
    clock: FrozenClock,
    announced: Callable[[Callable[[], object]], list[str]],
) -> None:
    later = clock.now_ms() + 60_000
    delayed = driver.enqueue(request(queue="q-promote", run_at_ms=later)).id
    assert announced(lambda: operator_store.promote(delayed)) == ["q-promote"]

    driver.enqueue_many([request(queue="q-many", run_at_ms=later) for _ in range(3)])
    driver.enqueue(request(queue="q-other", run_at_ms=later))
    assert sorted(announced(lambda: operator_store.promote_many(BulkFilter(state="delayed")))) == ["q-many", "q-other"]

    done = enqueue_finished(driver, request(queue="q-requeue"))
    assert announced(lambda: operator_store.requeue(done)) == ["q-requeue"]

    cancelled = [driver.enqueue(request(queue="q-bulk")).id for _ in range(2)]
    for job_id in cancelled:
        assert operator_store.cancel(job_id) is not None
    assert announced(lambda: operator_store.requeue_many(BulkFilter(state="cancelled"))) == ["q-bulk"]

    operator_store.pause_queue("q-paused")
    assert announced(lambda: operator_store.resume_queue("q-paused")) == ["q-paused"]


@pytest.mark.django_db(transaction=True)
def test_refusals_and_quiet_operations_announce_nothing(
    driver: PostgresDriver,
    operator_store: PostgresOperatorStore,
    clock: FrozenClock,
    announced: Callable[[Callable[[], object]], list[str]],
) -> None:
    due = driver.enqueue(request(queue="q-quiet")).id

    def refused() -> None:
        with pytest.raises(UltimateError):
            operator_store.promote(due)
        with pytest.raises(UltimateError):
            operator_store.requeue(due)

    assert announced(refused) == []
    assert announced(lambda: operator_store.promote_many(BulkFilter(state="ready"))) == []
    assert announced(lambda: operator_store.cancel(due)) == []
    assert announced(lambda: operator_store.pause_queue("q-quiet")) == []


# -- the live-key race -------------------------------------------------------------------------------


def _hold_key_uncommitted(conninfo: str, key: str) -> tuple[psycopg.Connection[Any], str]:
    """Another session inserts a live row holding ``key`` and leaves its transaction open."""
    other = psycopg.connect(conninfo)
    holder = str(uuid.uuid4())
    other.execute(
        """
        INSERT INTO x_jobs (id, run_id, name, queue, tenant_id, idempotency_key, input, state, attempts,
                            max_attempts, priority, run_at, created_at, updated_at)
        VALUES (%s, %s, %s, %s, NULL, %s, '{}', 'ready', 0, 3, 0, now(), now(), now())
        """,
        [holder, str(uuid.uuid4()), JOB, QUEUE, key],
    )
    return other, holder


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test thread, which asserts on it
            out["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def _blocked_on_a_lock(admin: psycopg.Connection[Any]) -> bool:
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    return bool(row and row[0])


@pytest.mark.django_db(transaction=True)
def test_requeue_that_loses_the_key_to_a_concurrent_enqueue_is_duplicate(
    driver: PostgresDriver, operator_store: PostgresOperatorStore, conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    done = enqueue_finished(driver, request(key="raced"))
    other, holder = _hold_key_uncommitted(conninfo, "raced")

    def requeue_then_read() -> tuple[UltimateError | None, str]:
        # Inside the caller's transaction: the refusal must leave it usable (a savepoint rolled back).
        with transaction.atomic():
            try:
                operator_store.requeue(done)
            except UltimateError as exc:
                row = operator_store.get(done)
                assert row is not None
                return exc, row.state
        return None, "requeued"

    thread, out = _in_thread(requeue_then_read)
    try:
        eventually(lambda: _blocked_on_a_lock(admin), timeout=WAIT)
        other.commit()
    finally:
        other.close()
    thread.join(WAIT)
    assert "error" not in out, out.get("error")
    err, state = out["value"]
    assert err is not None and err.code == "X_JOB_DUPLICATE"
    assert err.meta == {"job_id": done, "holder": holder}
    assert isinstance(err.__cause__, Exception) and state == "done"


@pytest.mark.django_db(transaction=True)
def test_requeue_many_that_loses_a_key_runs_again_and_skips_it(
    driver: PostgresDriver, operator_store: PostgresOperatorStore, conninfo: str, admin: psycopg.Connection[Any]
) -> None:
    raced = enqueue_finished(driver, request(key="raced-many"))
    free = enqueue_finished(driver, request(key="free-many"))
    other, _holder = _hold_key_uncommitted(conninfo, "raced-many")
    thread, out = _in_thread(lambda: operator_store.requeue_many(BulkFilter(state="done")))
    try:
        eventually(lambda: _blocked_on_a_lock(admin), timeout=WAIT)
        other.commit()
    finally:
        other.close()
    thread.join(WAIT)
    assert out == {"value": BulkResult(affected=1, remaining=0)}
    states = {job_id: record(operator_store, job_id).state for job_id in (raced, free)}
    assert states == {raced: "done", free: "ready"}


# -- ids that are not UUIDs, and id prefixes ----------------------------------------------------------


@pytest.mark.django_db
def test_an_id_that_is_not_a_uuid_names_no_row(
    driver: PostgresDriver,
    operator_store: PostgresOperatorStore,
    clock: FrozenClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for bad in ("not-a-uuid", "", "42"):
        assert operator_store.get(bad) is None and operator_store.steps(bad) == []
        assert operator_store.cancel(bad) is None
        for op in (operator_store.remove, operator_store.requeue, operator_store.promote):
            with raises_code("X_JOB_NOT_FOUND"):
                op(bad)
    progress = Progress(done=1, total=None, note=None, at_ms=clock.now_ms())
    assert driver.record_progress("nope", ClaimRef("w1", "not-a-claim"), progress) is False
    assert [r.getMessage() for r in caplog.records] == ["jobs.settle.unowned"]


@pytest.mark.django_db
def test_a_claim_that_is_not_a_uuid_misses(driver: PostgresDriver, operator_store: PostgresOperatorStore) -> None:
    driver.enqueue(request())
    job = claim_one(driver)
    progress = Progress(done=1, total=2, note="n", at_ms=0)
    assert driver.record_progress(job.id, ClaimRef(job.worker_id, "garbage"), progress) is False
    assert driver.record_progress(job.id, job.ref, progress) is True


@pytest.mark.django_db
def test_list_id_prefix_is_exact(driver: PostgresDriver, operator_store: PostgresOperatorStore) -> None:
    a = driver.enqueue(request(id=fixed_id("abcdef01", 1))).id
    b = driver.enqueue(request(id=fixed_id("abcdef02", 2))).id

    def ids(prefix: str) -> set[str]:
        return {r.id for r in operator_store.list(JobFilter(id_prefix=prefix)).rows}

    assert ids("") == ids("abcdef0") == {a, b}
    assert ids("abcdef01") == ids("abcdef01-") == ids(a) == {a}
    assert ids(b[:14]) == {b}
    for nothing in ("ABCDEF01", "abcdef01x", "abcdef010", "g", a + "0", "%", "_"):
        assert ids(nothing) == set(), nothing


@pytest.mark.django_db
def test_a_wellformed_cursor_whose_id_is_not_a_uuid_is_refused(operator_store: PostgresOperatorStore) -> None:
    import base64

    cursor = "jc1." + base64.urlsafe_b64encode(b'{"c":1,"i":"x"}').decode().rstrip("=")
    with raises_code("X_JOB_PAGE_INVALID") as info:
        operator_store.list(JobFilter(after=cursor))
    assert info.value.meta == {"cursor": "after"}


# -- the counter rollup, against the memory driver ----------------------------------------------------


def _month_of_counters(driver: Any, clock: FrozenClock) -> list[list[tuple[int, int, int, int]]]:
    """Settle jobs across 40 days at uneven instants and roll up after each; answers every snapshot."""
    name = "conformance.month"
    snapshots = []
    for step in range(40):
        for _ in range(step % 3 + 1):
            settle_done(driver, name, duration_ms=step)
            clock.advance(37_000)
        clock.advance(86_400_000 - 23 * 60_000 + step * 61_000)
        driver.rollup_counters()
        buckets = driver.operator.counters(job=name, since_ms=0)
        snapshots.append([(b.bucket_ms, b.width_ms, b.done, b.duration_ms) for b in buckets])
    return snapshots


@pytest.mark.django_db
def test_rollup_matches_the_memory_driver_over_a_month() -> None:
    memory_clock, pg_clock = FrozenClock(), FrozenClock()
    expected = _month_of_counters(MemoryDriver(clock=memory_clock), memory_clock)
    assert _month_of_counters(PostgresDriver(clock=pg_clock), pg_clock) == expected
    widths = {width for snapshot in expected for _, width, _, _ in snapshot}
    assert widths == {width for width, _ in COUNTER_TIERS}  # every tier was reached
    assert expected[-1][0][0] > expected[0][0][0]  # and the oldest hours were dropped
