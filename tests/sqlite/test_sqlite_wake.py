"""The wake without LISTEN/NOTIFY, on wall time: an enqueue in the worker's own process wakes it at once;
another process's enqueue is found by the poll, whose wait doubles from 250 ms to the 2 s idle ceiling, so
an idle worker's statements per minute are bounded and the pickup latency is at most the ceiling.

A second ``SqliteDriver`` in this process stands for another process: it has no subscriber, so only the
worker's poll finds its rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from ultimate_jobs import JobRun, job, registry
from ultimate_jobs.conf import set_job_driver
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.polling import IDLE_POLL_CEILING_MS
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


@pytest.fixture
def started() -> Iterator[dict[str, Any]]:
    ran: dict[str, float] = {}
    done = threading.Event()

    @job(name="lite_wake_probe", idempotency_key=lambda i: i["k"], tenant="none", queue=QUEUE)
    def probe(run: JobRun[Any]) -> None:
        ran[run.input["k"]] = time.monotonic()
        done.set()

    driver = SqliteDriver()
    counting = Counting(driver)
    set_job_driver(driver)  # the process's driver: what an enqueue in this process goes through
    worker: JobWorker = job_worker(driver=driver, context=lambda: None, queues=[QUEUE], concurrency=2)
    worker.start()
    try:
        yield {"driver": driver, "counting": counting, "ran": ran, "done": done, "handle": probe}
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
    per_idle_minute = 60_000 // IDLE_POLL_CEILING_MS * STATEMENTS_PER_IDLE_CLAIM
    assert per_idle_minute == 180  # what docs/sqlite.md reports


def test_an_enqueue_in_the_workers_process_wakes_it_at_once(started: dict[str, Any]) -> None:
    time.sleep(3.0)  # idle at the 2 s ceiling: the next poll is up to 2 s away
    sent = time.monotonic()
    started["handle"].enqueue({"k": "here"})  # through the process's driver: SqliteDriver.subscribe hears it
    assert started["done"].wait(5.0)
    assert started["ran"]["here"] - sent < 0.5


def test_another_processs_enqueue_is_picked_up_within_the_idle_ceiling(started: dict[str, Any]) -> None:
    time.sleep(3.0)
    other = SqliteDriver()  # no subscriber: only the worker's poll finds this row
    sent = time.monotonic()
    other.enqueue(started["handle"].build_request({"k": "there"}))
    assert started["done"].wait(5.0)
    assert started["ran"]["there"] - sent <= IDLE_POLL_CEILING_MS / 1000 + 0.5
