"""The Redis driver's sorted lists and counts: every order with every filter pages forward and back, a sort
past COUNT_CAP matching rows sorts the newest of them and says so, and a count over more rows than it reads is
an estimate that says so."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import pytest
import redis

from ultimate_jobs.contracts.jobs import NackOptions
from ultimate_jobs.contracts.operator import JobFilter, JobRecord
from ultimate_jobs.contracts.ordering import COUNT_CAP, JOB_ORDERS, JobOrder, job_cursor, order_parts, sort_key
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance import QUEUE, claim_one, finish, request, requests

START = 1_700_000_000_000
"""Where each test's clock starts, so a created range can name the rows' instants."""


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(START)


@pytest.fixture
def driver(redis_client: redis.Redis, clock: FrozenClock) -> RedisDriver:
    return RedisDriver(redis_client, clock=clock, done_ttl_ms=60_000)


def _expected(driver: RedisDriver, flt: JobFilter) -> list[str]:
    """The ids ``flt`` lists, sorted here from the rows its filter matches newest first (the creation walk)."""
    column, descending = order_parts(flt.order)
    rows: list[JobRecord] = list(driver.operator.list(replace(flt, order="-created", limit=200)).rows)
    if column == "finished":
        rows = [r for r in rows if r.finished_at_ms is not None]
    return [r.id for r in sorted(rows, key=lambda r: sort_key(r, column), reverse=descending)]


def _mixed_rows(driver: RedisDriver, clock: FrozenClock) -> None:
    """Rows over three queues (one a prefix of another), three names, two tenants and every settle."""
    for i in range(24):
        queue = ("a", "ab", "b")[i % 3]
        driver.enqueue(request(("x", "X", "y")[i % 3 - 1], queue=queue, tenant_id=("t1", None)[i % 2]))
        if i % 4 == 0:
            driver.enqueue(request("x", queue=queue, run_at_ms=clock.now_ms() + 1_000 * i))
        clock.advance(i % 2)  # ties on creation every other row
    settles: tuple[tuple[str, Literal["done", "dead", "failed"]], ...] = (
        ("a", "done"),
        ("ab", "dead"),
        ("b", "failed"),
        ("a", "done"),
    )
    for queue, state in settles:
        finish(driver, claim_one(driver, queues=(queue,)), state)
        clock.advance(3)
    job = claim_one(driver, queues=("b",))
    assert driver.nack(job.id, job.ref, NackOptions(error="again", run_at_ms=clock.now_ms() + 500))


@pytest.mark.parametrize("order", JOB_ORDERS)
@pytest.mark.parametrize(
    "flt",
    [
        JobFilter(),
        JobFilter(queue="a"),
        JobFilter(name="x"),
        JobFilter(state="done"),
        JobFilter(tenant_id="t1", state="ready"),
        JobFilter(created_from_ms=START + 4, created_to_ms=START + 9),
    ],
    ids=["all", "queue", "name", "state", "tenant-state", "created"],
)
def test_each_order_with_each_filter_pages_forward_and_back(
    driver: RedisDriver, clock: FrozenClock, order: JobOrder, flt: JobFilter
) -> None:
    _mixed_rows(driver, clock)
    flt = replace(flt, order=order, limit=3)
    expected = _expected(driver, flt)
    walked: list[str] = []
    pages: list[tuple[JobRecord, ...]] = []
    page = driver.operator.list(flt)
    while True:
        walked.extend(r.id for r in page.rows)
        pages.append(page.rows)
        if page.is_last:
            break
        page = driver.operator.list(replace(flt, after=job_cursor(page.rows[-1], order)))
    assert walked == expected
    last = [p for p in pages if p][-1] if expected else ()
    back = [r.id for r in last]
    first = last[0] if last else None
    while first is not None:
        page = driver.operator.list(replace(flt, before=job_cursor(first, order)))
        back = [r.id for r in page.rows] + back
        first = page.rows[0] if page.rows else None
    assert back == expected


# -- counts ------------------------------------------------------------------------------------


def _many(driver: RedisDriver, n: int, **fields: object) -> None:
    for start in range(0, n, 1_000):
        driver.enqueue_many(requests(min(1_000, n - start), **fields))


def test_count_is_exact_from_the_counts_the_sets_and_a_short_walk(driver: RedisDriver, clock: FrozenClock) -> None:
    _mixed_rows(driver, clock)
    every = list(driver.operator.list(JobFilter(limit=200)).rows)
    for flt in (
        JobFilter(queue="a", state="ready"),
        JobFilter(queue="ab", order="-finished"),
        JobFilter(state="dead"),
        JobFilter(state="done", order="finished"),
        JobFilter(state="ready", order="finished"),
        JobFilter(tenant_id="t1"),
        JobFilter(name="X", state="delayed"),
        JobFilter(created_from_ms=every[-1].created_at_ms + 1),
    ):
        wanted = len(_expected(driver, flt))
        count = driver.operator.count(flt)
        assert (count.rows, count.basis) == (wanted, "count"), flt


def test_count_over_the_cap_estimates_from_a_sample(driver: RedisDriver) -> None:
    _many(driver, COUNT_CAP, tenant_id="t1")
    _many(driver, COUNT_CAP // 2)
    count = driver.operator.count(JobFilter(tenant_id="t1"))
    assert count.basis == "sample" and count.rows is not None and not count.exact
    assert abs(count.rows - COUNT_CAP) <= COUNT_CAP // 4
    assert count.text().startswith("about ")
    assert driver.operator.count(JobFilter(queue=QUEUE)) == driver.operator.count(JobFilter())
    assert driver.operator.count(JobFilter()).rows == COUNT_CAP + COUNT_CAP // 2  # exact: the set's size


def test_a_sort_past_the_cap_sorts_the_newest_rows_and_says_so(driver: RedisDriver, clock: FrozenClock) -> None:
    driver.enqueue_many(requests(5, name="zz.oldest"))  # the oldest rows: outside the window
    clock.advance(1)
    _many(driver, COUNT_CAP)
    page = driver.operator.list(JobFilter(order="-name", limit=5))
    assert page.window == COUNT_CAP and {r.name for r in page.rows} == {"conformance.job"}
    whole = driver.operator.list(JobFilter(order="-name", name="zz.oldest"))
    assert whole.window is None and len(whole.rows) == 5
    assert driver.operator.list(JobFilter(limit=5)).window is None  # by creation: every row is in order


def test_a_filter_the_sample_never_meets_is_not_counted(driver: RedisDriver) -> None:
    _many(driver, COUNT_CAP + 100)
    count = driver.operator.count(JobFilter(idempotency_key="held-by-no-row"))
    assert (count.rows, count.basis) == (None, None) and count.text().startswith("not counted")
