"""The job list's sorts and counts, on every driver with an operator store (``driver.operator.list`` with
``JobFilter.order``, ``driver.operator.count``). A mixin of
:class:`~ultimate_jobs.testing.conformance.DriverConformance`.

The rows are built through the protocol so each sort column differs: names and queues that differ in case
(text sorts by code point everywhere), attempts spent by claims, run times set by a retry and a delay,
finishes at different instants, and two rows created in one millisecond (the tie the id breaks).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ..contracts.jobs import NackOptions
from ..contracts.operator import JobFilter, JobRecord
from ..contracts.ordering import COUNT_CAP, JOB_ORDERS, JobOrder, job_cursor, order_parts, sort_key
from ..contracts.protocol import JobDriver, OperatorStore
from .clock import FrozenClock
from .conformance_support import QUEUE, claim_one, finish, one_millisecond, raises_code, request, requests


def _rows(driver: JobDriver, clock: FrozenClock) -> None:
    """Six rows whose every sort column differs somewhere, with ties on each."""
    driver.enqueue(request("beta", queue="conformance-b"))
    finish(driver, claim_one(driver, queues=("conformance-b",)))  # done, 1 attempt
    clock.advance(7)
    driver.enqueue(request("Alpha", queue=QUEUE))
    job = claim_one(driver)
    assert driver.nack(job.id, job.ref, NackOptions(error="again", run_at_ms=clock.now_ms()))
    clock.advance(3)
    finish(driver, claim_one(driver), "dead")  # dead, 2 attempts
    clock.advance(5)
    driver.enqueue(request("alpha", queue="Conformance-c", run_at_ms=clock.now_ms() + 60_000))  # delayed
    clock.advance(1)
    with one_millisecond():  # created in one millisecond: the id breaks the tie
        driver.enqueue_many(requests(2, name="gamma", queue=QUEUE))
    clock.advance(2)
    driver.enqueue(request("beta", queue=QUEUE, run_at_ms=clock.now_ms() - 30_000))
    job = claim_one(driver)  # the oldest run time is claimed first
    clock.advance(4)
    finish(driver, job, "failed")  # failed, 1 attempt


def _expected(operator_store: OperatorStore, order: JobOrder) -> list[str]:
    """Every row's id in ``order``, sorted here from the rows as stored."""
    column, descending = order_parts(order)
    rows: list[JobRecord] = list(operator_store.list(JobFilter(limit=200)).rows)
    if column == "finished":
        rows = [r for r in rows if r.finished_at_ms is not None]
    return [r.id for r in sorted(rows, key=lambda r: sort_key(r, column), reverse=descending)]


class OrderingContract:
    """``OperatorStore.list`` sorted by each column, paged by its cursors; ``OperatorStore.count``."""

    @pytest.mark.parametrize("order", JOB_ORDERS)
    def test_each_order_lists_every_row_in_it_with_ties_by_creation_then_id(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock, order: JobOrder
    ) -> None:
        _rows(driver, clock)
        expected = _expected(operator_store, order)
        assert len(expected) == (3 if order.endswith("finished") else 6)
        assert [r.id for r in operator_store.list(JobFilter(order=order)).rows] == expected

    @pytest.mark.parametrize("order", JOB_ORDERS)
    def test_each_order_pages_forward_and_back_by_its_cursors(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock, order: JobOrder
    ) -> None:
        _rows(driver, clock)
        expected = _expected(operator_store, order)
        walked: list[str] = []
        pages: list[tuple[JobRecord, ...]] = []
        flt = JobFilter(order=order, limit=2)
        for _ in range(10):
            page = operator_store.list(flt)
            walked.extend(r.id for r in page.rows)
            pages.append(page.rows)
            if page.is_last:
                break
            flt = replace(flt, after=job_cursor(page.rows[-1], order))
        assert walked == expected
        # back from the last page's first row: the page before it, in the same order
        pages = [p for p in pages if p]
        last = pages[-1]
        back = operator_store.list(JobFilter(order=order, limit=2, before=job_cursor(last[0], order)))
        assert back.rows == pages[-2]

    def test_a_filter_narrows_a_sorted_list(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        _rows(driver, clock)
        rows = operator_store.list(JobFilter(order="-attempts", queue=QUEUE)).rows
        assert [r.attempts for r in rows] == [2, 1, 0, 0]
        assert [r.name for r in operator_store.list(JobFilter(order="name", state="ready")).rows] == ["gamma", "gamma"]
        assert operator_store.list(JobFilter(order="finished", state="ready")).rows == ()

    def test_text_sorts_by_code_point(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        _rows(driver, clock)
        names = [r.name for r in operator_store.list(JobFilter(order="name")).rows]
        assert names == sorted(names) and names[:2] == ["Alpha", "alpha"]
        queues = [r.queue for r in operator_store.list(JobFilter(order="-queue")).rows]
        assert queues[0] == "conformance-b" and queues[-1] == "Conformance-c"

    @pytest.mark.parametrize("order", ["created", "bogus", "-", "name ", "--created", ""])
    def test_an_unknown_order_is_refused(self, operator_store: OperatorStore, order: str) -> None:
        if order == "created":
            operator_store.list(JobFilter(order="created"))  # a known one is taken
            return
        with raises_code("X_JOB_PAGE_INVALID") as info:
            JobFilter(order=order)  # type: ignore[arg-type]  # what a caller's typo passes
        assert info.value.meta["known"][0] == "created"

    def test_a_cursor_of_another_order_is_refused(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        _rows(driver, clock)
        row = operator_store.list(JobFilter(order="name")).rows[0]
        for cursor, order in ((job_cursor(row, "name"), "-name"), (job_cursor(row), "attempts")):
            with raises_code("X_JOB_PAGE_INVALID") as info:
                operator_store.list(JobFilter(order=order, after=cursor))  # type: ignore[arg-type]
            assert info.value.meta["cursor"] == "after"

    # -- counts --------------------------------------------------------------------------------

    def test_count_is_exact_over_a_small_set_with_each_filter(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        _rows(driver, clock)
        for flt, rows in (
            (JobFilter(), 6),
            (JobFilter(queue=QUEUE), 4),
            (JobFilter(state="ready"), 2),
            (JobFilter(state="dead", queue=QUEUE), 1),
            (JobFilter(name="beta"), 2),
            (JobFilter(order="-finished"), 3),
            (JobFilter(queue="conformance-none"), 0),
        ):
            count = operator_store.count(flt)
            assert (count.rows, count.basis, count.exact) == (rows, "count", True), flt

    def test_count_over_the_cap_says_it_is_no_exact_count(
        self, driver: JobDriver, operator_store: OperatorStore
    ) -> None:
        n = COUNT_CAP + 50
        for start in range(0, n, 1_000):
            driver.enqueue_many(requests(min(1_000, n - start)))
        count = operator_store.count(JobFilter(queue=QUEUE))
        if count.exact:  # a driver that counts every row cheaply (the memory driver)
            assert count.rows == n
        elif count.basis == "bound":
            assert count.rows == COUNT_CAP and count.text() == f"more than {COUNT_CAP:,}"
        else:
            assert count.basis in ("planner", "sample") and count.rows is not None and count.rows > 0
            assert count.text().startswith("about ")
