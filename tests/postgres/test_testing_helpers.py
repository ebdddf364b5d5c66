"""Testing the Django way: ``JobsTestCase`` under Django's ``TestCase``, the ``jobs_queue`` pytest
fixture, and ``run_jobs()`` in a ``TestCase`` on the Postgres driver and the real clock — and the async
forms docs/testing.md shows: ``aenqueue`` then ``run_jobs`` through ``sync_to_async``, in a
pytest-asyncio test and in an ``async def`` method of a Django ``TestCase``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import TestCase

from ultimate_jobs import JobRun, job
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import job_clock, job_driver, set_job_driver
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.testing import FrozenClock, JobsQueue, JobsTestCase, run_jobs
from ultimate_jobs.testing.django import jobs_queue  # noqa: F401 — the fixture, as a user's conftest imports it

RAN: list[str] = []


@pytest.fixture(autouse=True)
def closed_after() -> Iterator[None]:
    """Close this thread's connection once the test's transaction is gone: a later test that runs a job
    body without database access must not find a session the row-security scope would have to set."""
    yield
    connections.close_all()


@job(idempotency_key=lambda i: f"nudge:{i['user']}", tenant="none", retry={"attempts": 3, "delay": "1m"})
def nudge_user(run: JobRun[Any]) -> str:
    RAN.append(run.input["user"])
    if run.attempt == 1:
        raise ConnectionError("mail server away")
    run.step.sleep("3d")
    return "sent"


class WelcomeTests(JobsTestCase, TestCase):
    def test_run_jobs_skips_the_retry_wait_and_the_sleep(self) -> None:
        RAN.clear()
        nudge_user.enqueue({"user": "ada"})
        report = self.run_jobs()
        self.assertEqual(report.outcomes["completed"], 1)
        self.assertEqual(report.outcomes["retried"], 1)
        self.assertIsInstance(job_driver(), MemoryDriver)
        self.assertIsInstance(job_clock(), FrozenClock)


@pytest.mark.django_db  # pytest-django's form of a Django TestCase: the test runs in a rolled-back transaction
def test_run_jobs_on_the_real_clock_runs_what_is_due_and_leaves_the_rest() -> None:
    """No FrozenClock: the configured (here Postgres) driver inside the test's transaction."""
    RAN.clear()
    set_job_driver(PostgresDriver())

    @job(idempotency_key=lambda i: i["k"], tenant="none")
    def record_now(run: JobRun[Any]) -> None:
        RAN.append(run.input["k"])

    try:
        record_now.enqueue({"k": "due"})
        later = record_now.enqueue({"k": "later"}, delay="1h")
        report = run_jobs()
        assert RAN == ["due"] and report.outcomes["completed"] == 1
        row = job_driver().operator.get(later.id)  # type: ignore[union-attr]
        assert row is not None and row.state == "delayed"
        with pytest.raises(TypeError):
            run_jobs(advance=True)  # jumping time needs a FrozenClock
    finally:
        registry.unregister("record_now")
        set_job_driver(None)


@pytest.mark.django_db
def test_the_jobs_queue_fixture_installs_and_removes(jobs_queue: JobsQueue) -> None:  # noqa: F811
    RAN.clear()
    assert job_driver() is jobs_queue.driver
    nudge_user.enqueue({"user": "bo"})
    report = jobs_queue.run_jobs()
    assert report.outcomes["completed"] == 1
    assert RAN == ["bo", "bo", "bo"]  # the failed attempt, the one that slept, the replay that finished


@pytest.mark.django_db
def test_after_the_fixture_the_configured_driver_is_back() -> None:
    assert not isinstance(job_clock(), FrozenClock)


# -- async tests (docs/testing.md, "Async code and async jobs") --------------------------------------


# docs/testing.md's job; named apart from the admin scenario's own send_receipt, and on a queue of its own:
# module-level, it stays registered in every test process, and an async job on "default" would give every
# worker test there async slots too
@job(name="docs.send_receipt", idempotency_key=lambda i: f"receipt:{i['order_id']}", tenant="none",
     retry={"attempts": 2}, queue="docs-receipts")  # fmt: skip
async def send_receipt(run: JobRun[Any]) -> str:
    await asyncio.sleep(0)  # the HTTP call, in the real job
    return f"receipt for {run.input['order_id']}"


@pytest.mark.asyncio
async def test_a_pytest_asyncio_test_aenqueues_and_drains_with_run_jobs(jobs_queue: JobsQueue) -> None:  # noqa: F811
    queued = await send_receipt.aenqueue({"order_id": "o-1"})
    many = await send_receipt.aenqueue_many([{"order_id": "o-2"}, {"order_id": "o-3"}])
    report = await sync_to_async(jobs_queue.run_jobs)()
    assert report.outcomes["completed"] == 3
    assert report.last(queued.id).result == "receipt for o-1"  # type: ignore[union-attr]
    assert [report.last(q.id).result for q in many] == ["receipt for o-2", "receipt for o-3"]  # type: ignore[union-attr]


class ReceiptTests(JobsTestCase, TestCase):
    async def test_the_receipt_is_sent(self) -> None:
        queued = await send_receipt.aenqueue({"order_id": "o-1"})
        report = await sync_to_async(self.run_jobs)()
        self.assertEqual(report.last(queued.id).result, "receipt for o-1")  # type: ignore[union-attr]


class ReceiptOnPostgresTests(TestCase):
    """No queue installed: the configured Postgres driver on the real clock. The async test method's
    ``aenqueue`` and ``run_jobs`` come back to the test's thread, so they see its transaction."""

    async def test_aenqueue_writes_in_the_tests_transaction(self) -> None:
        set_job_driver(PostgresDriver())
        try:
            queued = await send_receipt.aenqueue({"order_id": "o-pg"})
            in_atomic = await sync_to_async(lambda: connections["default"].in_atomic_block)()
            self.assertTrue(in_atomic)  # the test's own transaction, rolled back after it
            report = await sync_to_async(run_jobs)()
            self.assertEqual(report.last(queued.id).result, "receipt for o-pg")  # type: ignore[union-attr]
        finally:
            set_job_driver(None)
