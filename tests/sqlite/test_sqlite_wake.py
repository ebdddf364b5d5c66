"""The wake without LISTEN/NOTIFY, on wall time: an enqueue in the worker's own process wakes it at once;
another process's commit is heard by the watch on ``PRAGMA data_version`` (every 100 ms), which wakes the
worker only when that commit made a row due; behind it the poll's wait doubles from 250 ms to the idle
ceiling (5 s while the watch is live, 2 s without it), so an idle worker's statements per minute are
bounded.

A second ``SqliteDriver`` in this process stands for another process: it has no subscriber, so its rows
reach the worker through the watch or the poll — and with ``watch_interval_ms=None`` through the poll
alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from ultimate_jobs import JobRun, job
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.drivers.sqlite.rows import ts
from ultimate_jobs.drivers.sqlite.watch import DataVersionWatch
from ultimate_jobs.runtime.polling import IDLE_POLL_CEILING_MS, WOKEN_IDLE_POLL_CEILING_MS
from ultimate_jobs.worker import JobWorker, job_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

QUEUE = "lite-wake"
IDLE_S = 5.0
QUERIES_PER_IDLE_CLAIM = 4  # through the executor: the registry row (when due), the pause read, the two claim arms
STATEMENTS_PER_IDLE_CLAIM = QUERIES_PER_IDLE_CLAIM + 2  # and the transaction's BEGIN IMMEDIATE and COMMIT


class Counting:
    """Counts the claims and the statements a driver runs."""

    def __init__(self, driver: SqliteDriver) -> None:
        self.claims = 0
        self.statements = 0
        inner_query, inner_claim = driver.executor.query, driver.claim

        def query(sql: str, params: Any = None) -> Any:
            self.statements += 1
            return inner_query(sql, params)

        def claim(**options: Any) -> Any:
            self.claims += 1
            return inner_claim(**options)

        driver.executor.query = query  # type: ignore[method-assign]
        driver.claim = claim  # type: ignore[method-assign]


@pytest.fixture(params=["watch", "poll only"])
def started(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    ran: dict[str, float] = {}
    done = threading.Event()

    @job(name="lite_wake_probe", idempotency_key=lambda i: i["k"], tenant="none", queue=QUEUE)
    def probe(run: JobRun[Any]) -> None:
        ran[run.input["k"]] = time.monotonic()
        done.set()

    driver = SqliteDriver() if request.param == "watch" else SqliteDriver(watch_interval_ms=None)
    counting = Counting(driver)
    set_job_driver(driver)  # the process's driver: what an enqueue in this process goes through
    worker: JobWorker = job_worker(driver=driver, context=lambda: None, queues=[QUEUE], concurrency=2)
    worker.start()
    try:
        yield {"driver": driver, "counting": counting, "ran": ran, "done": done, "handle": probe, "kind": request.param}
    finally:
        worker.drain(deadline_ms=5_000)
        set_job_driver(None)
        registry.unregister("lite_wake_probe")
        connections.close_all()


def test_an_idle_worker_polls_with_a_doubling_wait_and_a_bounded_statement_count(started: dict[str, Any]) -> None:
    counting: Counting = started["counting"]
    time.sleep(IDLE_S)
    claims, statements = counting.claims, counting.statements
    # claims at 0, 0.25, 0.75, 1.75, 3.75 s (then every 2 s): five in the first five seconds, never more than
    # one per 250 ms, and at the ceiling 30 per idle minute
    assert 3 <= claims <= 6, claims
    assert statements <= claims * QUERIES_PER_IDLE_CLAIM, (claims, statements)
    watched = started["kind"] == "watch"
    assert started["driver"].wake_is_live() is watched
    ceiling = WOKEN_IDLE_POLL_CEILING_MS if watched else IDLE_POLL_CEILING_MS
    per_idle_minute = 60_000 // ceiling * STATEMENTS_PER_IDLE_CLAIM
    assert per_idle_minute == (72 if watched else 180)  # what docs/sqlite.md reports


def test_an_enqueue_in_the_workers_process_wakes_it_at_once(started: dict[str, Any]) -> None:
    time.sleep(3.0)  # idle at the 2 s ceiling: the next poll is up to 2 s away
    sent = time.monotonic()
    started["handle"].enqueue({"k": "here"})  # through the process's driver: SqliteDriver.subscribe hears it
    assert started["done"].wait(5.0)
    assert started["ran"]["here"] - sent < 0.5


def test_another_processs_enqueue_is_picked_up_through_the_watch_or_within_the_idle_ceiling(
    started: dict[str, Any],
) -> None:
    time.sleep(3.0)  # idle: the next poll is seconds away
    other = SqliteDriver()  # no subscriber: the worker hears of this row through its watch, or polls
    sent = time.monotonic()
    other.enqueue(started["handle"].build_request({"k": "there"}))
    assert started["done"].wait(6.0)
    took = started["ran"]["there"] - sent
    if started["kind"] == "watch":
        assert took < 1.0, took  # about one 100 ms watch interval, then the claim
    else:
        assert took <= IDLE_POLL_CEILING_MS / 1000 + 0.5, took


def test_the_watch_hears_a_commit_that_makes_a_row_due_and_nothing_else() -> None:
    """Another connection's commit of a due row is heard within an interval; a commit that makes nothing
    due (a pause row, a delayed row) moves the counter and wakes nobody."""
    from django.db import connection

    heard: list[str] = []
    other = SqliteDriver()
    watch = DataVersionWatch(
        str(connection.settings_dict["NAME"]), now=lambda: ts(other.clock.now_ms()), on_due=heard.append
    )
    try:
        assert _eventually(watch.is_live)
        other.operator.pause_queue("elsewhere")
        other.enqueue(request_for("later", run_at_ms=other.clock.now_ms() + 3_600_000))
        time.sleep(0.5)
        assert heard == []
        other.enqueue(request_for("now"))
        assert _eventually(lambda: heard == [QUEUE])
    finally:
        watch.stop()
    assert not watch.is_live()


def _eventually(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def request_for(key: str, **options: Any) -> Any:
    from ultimate_jobs.contracts.jobs import EnqueueRequest

    return EnqueueRequest("lite_wake_other", QUEUE, {}, key, None, 1, **options)


def test_a_watch_on_a_file_it_cannot_read_is_not_live_and_says_so_once(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-such-dir" / "jobs.sqlite3"  # the directory does not exist: no connection opens
    watch = DataVersionWatch(str(missing), now=lambda: "", on_due=lambda queue: None, interval_ms=10)
    try:
        time.sleep(0.3)  # some thirty failed attempts
        assert not watch.is_live()
    finally:
        watch.stop()
    lost = [r for r in caplog.records if r.getMessage() == "jobs.wake.lost"]
    assert len(lost) == 1
