"""The Redis driver's order indexes: every write keeps a row's entries where its values put them, a store
written before the indexes is indexed on its first sorted list, and a count over more rows than it reads is
an estimate that says so."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import pytest
import redis

from ultimate_jobs.drivers.ordering import COUNT_CAP, JOB_ORDERS, JobOrder, order_parts, sort_key
from ultimate_jobs.drivers.records import BulkFilter, JobFilter, JobRecord, NackOptions, job_cursor
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.drivers.redis import operator as redis_operator
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance import QUEUE, claim_one, enqueue_finished, finish, request, requests

OFF = 10**15
"""The prelude's OFF: fixed-width numbers in index entries sort negatives first."""

COLUMNS = ("run_at", "attempts", "finished", "name", "queue")

START = 1_700_000_000_000
"""Where each test's clock starts, so a created range can name the rows' instants."""


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(START)


@pytest.fixture
def driver(redis_client: redis.Redis, clock: FrozenClock) -> RedisDriver:
    return RedisDriver(redis_client, clock=clock, done_ttl_ms=60_000)


def _entry(column: str, value: str, created: str, job_id: str) -> str:
    """A row's entry in a column's index, as the prelude's ``ixm`` writes it."""
    if column in ("name", "queue"):
        return f"{value}\0{int(created) + OFF:016d}{job_id}"
    return f"{int(value) + OFF:016d}{int(created) + OFF:016d}{job_id}"


def _entries(driver: RedisDriver) -> dict[str, set[str]]:
    """Every index's entries as stored."""
    return {column: set(driver.client.zrange(driver.key("ix", column), 0, -1)) for column in COLUMNS}


def assert_indexes_follow_the_rows(driver: RedisDriver) -> None:
    """Each index holds exactly the entries the stored rows make: none missing, none stale, none of a row gone."""
    wanted: dict[str, set[str]] = {column: set() for column in COLUMNS}
    for job_id in driver.client.zrange(driver.key("all"), 0, -1):
        row = driver.client.hgetall(driver.key("job", job_id))
        for column in COLUMNS:
            if column in row:
                wanted[column].add(_entry(column, row[column], row["created"], job_id))
    assert _entries(driver) == wanted


def _drop_indexes(driver: RedisDriver) -> None:
    """What a store written before the order indexes looks like: rows, and no index or marker."""
    driver.client.delete(*(driver.key("ix", name) for name in (*COLUMNS, "version")))


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


def test_every_write_keeps_each_index_entry_where_the_row_puts_it(driver: RedisDriver, clock: FrozenClock) -> None:
    driver.enqueue_many(requests(3))
    delayed = driver.enqueue(request(run_at_ms=clock.now_ms() + 60_000)).id
    assert_indexes_follow_the_rows(driver)
    job = claim_one(driver)  # attempts 0 -> 1
    assert_indexes_follow_the_rows(driver)
    assert driver.operator.list(JobFilter(order="-attempts", limit=1)).rows[0].id == job.id
    clock.advance(5)
    assert driver.nack(job.id, job.ref, NackOptions(error="later", run_at_ms=clock.now_ms() + 30_000))
    assert_indexes_follow_the_rows(driver)
    assert driver.operator.list(JobFilter(order="-run_at", limit=1)).rows[0].id == delayed
    clock.advance(30_000)
    again = claim_one(driver)
    assert driver.nack(again.id, again.ref, NackOptions(error="interrupted", count_attempt=False))
    assert_indexes_follow_the_rows(driver)
    done = claim_one(driver)
    assert driver.operator.list(JobFilter(order="finished")).rows == ()
    finish(driver, done)
    assert_indexes_follow_the_rows(driver)
    assert [r.id for r in driver.operator.list(JobFilter(order="-finished")).rows] == [done.id]
    driver.operator.requeue(done.id)  # no longer finished; attempts 0, run time now
    assert_indexes_follow_the_rows(driver)
    assert driver.operator.list(JobFilter(order="finished")).rows == ()
    driver.operator.promote(delayed)
    driver.operator.cancel(delayed, "not needed")
    assert_indexes_follow_the_rows(driver)
    driver.enqueue_many(requests(2, run_at_ms=clock.now_ms() + 9_000))
    driver.operator.promote_many(BulkFilter(state="delayed"))
    driver.operator.requeue_many(BulkFilter(state="cancelled"))
    assert_indexes_follow_the_rows(driver)


def test_a_lapsed_final_attempt_buried_by_a_claim_is_in_the_finished_order(
    driver: RedisDriver, clock: FrozenClock
) -> None:
    job_id = driver.enqueue(request(max_attempts=1)).id
    claim_one(driver)
    clock.advance(60_000)  # past the lease
    assert [j.id for j in driver.claim(queues=[QUEUE], limit=1, worker_id="w2").buried] == [job_id]
    assert [r.id for r in driver.operator.list(JobFilter(order="finished")).rows] == [job_id]
    assert_indexes_follow_the_rows(driver)


def test_remove_purge_and_the_done_ttl_drop_a_row_from_every_index(driver: RedisDriver, clock: FrozenClock) -> None:
    dead = enqueue_finished(driver, request(), "dead")
    done = enqueue_finished(driver, request())
    removed = driver.enqueue(request()).id
    bulk = [driver.enqueue(r).id for r in requests(2, queue="bulk")]
    kept = driver.enqueue(request(run_at_ms=clock.now_ms() + 600_000)).id
    driver.operator.remove(removed)
    driver.operator.remove_many(BulkFilter(state="ready", queue="bulk"))
    clock.advance(10)
    assert driver.purge_finished(before_ms={"dead": clock.now_ms()}) == 1
    clock.advance(60_000)
    driver.claim(queues=[QUEUE], limit=1, worker_id="w1")  # a claim reaps the done rows past their ttl
    gone = {removed, dead, done, *bulk}
    assert driver.operator.get(done) is None
    for order in JOB_ORDERS:
        assert [r.id for r in driver.operator.list(JobFilter(order=order)).rows] in ([kept], [])
    assert not {e for entries in _entries(driver).values() for e in entries if any(e.endswith(i) for i in gone)}
    assert_indexes_follow_the_rows(driver)


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


def test_a_state_of_many_rows_is_found_by_walking_the_column_index(driver: RedisDriver, clock: FrozenClock) -> None:
    driver.enqueue_many([request(run_at_ms=clock.now_ms() - i % 97) for i in range(1_100)])  # over FEW_IN_STATE
    finish(driver, claim_one(driver), "done")
    clock.advance(1)
    finish(driver, claim_one(driver), "dead")
    every: list[JobRecord] = []
    page = driver.operator.list(JobFilter(limit=200))
    while True:  # every row, by the creation walk
        every.extend(page.rows)
        if page.is_last:
            break
        page = driver.operator.list(JobFilter(limit=200, after=job_cursor(page.rows[-1])))
    ready = [r for r in every if r.state == "ready"]
    orders: tuple[JobOrder, ...] = ("run_at", "-attempts", "name")
    for order in orders:
        column, descending = order_parts(order)
        expected = [r.id for r in sorted(ready, key=lambda r: sort_key(r, column), reverse=descending)]
        flt = JobFilter(order=order, state="ready", limit=150)
        walked: list[str] = []
        while True:
            page = driver.operator.list(flt)
            walked.extend(r.id for r in page.rows)
            if page.is_last:
                break
            flt = replace(flt, after=job_cursor(page.rows[-1], flt.order))
        assert walked == expected


def test_an_old_store_is_indexed_on_its_first_sorted_list(driver: RedisDriver, clock: FrozenClock) -> None:
    _mixed_rows(driver, clock)
    _drop_indexes(driver)
    assert driver.operator.list(JobFilter(limit=200)).rows  # sorted by creation: no index needed, none built
    assert not driver.client.exists(driver.key("ix", "version"))
    assert driver.operator.count(JobFilter(name="x")).exact  # counted off T:all, the indexes aside
    assert [r.id for r in driver.operator.list(JobFilter(order="-name", limit=200)).rows] == _expected(
        driver, JobFilter(order="-name")
    )
    assert driver.client.get(driver.key("ix", "version")) == redis_operator.ORDER_INDEX_VERSION
    assert_indexes_follow_the_rows(driver)
    assert driver.operator.build_order_indexes() == 0  # built: nothing more to do


def test_the_build_walks_in_batches_past_rows_deleted_and_added_between_them(
    driver: RedisDriver, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_operator, "INDEX_BATCH", 2)
    ids = [e.id for e in driver.enqueue_many(requests(5))]  # five rows in one millisecond: ties on the score
    clock.advance(1)
    ids += [driver.enqueue(request()).id for _ in range(3)]
    _drop_indexes(driver)
    first = driver.run("index_build", redis_operator.ORDER_INDEX_VERSION, "3", "", "")
    assert first[:2] == ["more", 3]
    driver.operator.remove(min(ids[:5]))  # a row behind the cursor goes: ranks shift, the cursor's key does not
    driver.enqueue(request())  # indexed by its own insert
    answer = driver.run("index_build", redis_operator.ORDER_INDEX_VERSION, "3", first[2], first[3])
    while answer[0] == "more":
        answer = driver.run("index_build", redis_operator.ORDER_INDEX_VERSION, "3", answer[2], answer[3])
    assert_indexes_follow_the_rows(driver)
    _drop_indexes(driver)
    assert driver.operator.build_order_indexes() == 8  # four calls of two rows, then the mark
    assert_indexes_follow_the_rows(driver)


def test_an_entry_its_row_no_longer_makes_is_skipped(driver: RedisDriver) -> None:
    job_id = driver.enqueue(request()).id
    other = driver.enqueue(request()).id
    driver.operator.build_order_indexes()  # (a build would index the row where its hash puts it)
    driver.client.hset(driver.key("job", job_id), "attempts", "7")  # a write that did not move the entry
    assert [r.id for r in driver.operator.list(JobFilter(order="attempts")).rows] == [other]


def test_a_text_filter_on_the_sorted_column_walks_only_its_range(driver: RedisDriver, clock: FrozenClock) -> None:
    _mixed_rows(driver, clock)
    for order in ("queue", "-queue"):
        rows = driver.operator.list(JobFilter(order=order, queue="a", limit=200)).rows  # not "ab"
        assert {r.queue for r in rows} == {"a"} and len(rows) == driver.operator.count(JobFilter(queue="a")).rows


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


def test_a_name_range_counts_exactly_once_the_indexes_are_built(driver: RedisDriver) -> None:
    _many(driver, COUNT_CAP + 100)
    driver.enqueue_many(requests(40, name="rare"))
    _drop_indexes(driver)
    assert not driver.operator.count(JobFilter(name="rare")).exact  # T:all is over the cap: a sample, or none
    driver.operator.build_order_indexes()
    count = driver.operator.count(JobFilter(name="rare"))
    assert (count.rows, count.basis) == (40, "count")


def test_a_filter_the_sample_never_meets_is_not_counted(driver: RedisDriver) -> None:
    _many(driver, COUNT_CAP + 100)
    count = driver.operator.count(JobFilter(idempotency_key="held-by-no-row"))
    assert (count.rows, count.basis) == (None, None) and count.text().startswith("not counted")
