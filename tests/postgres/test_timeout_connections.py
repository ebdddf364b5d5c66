"""A job's timeout settles the attempt from the clock's timer thread — a thread no role owns, that lives
as long as the process. The settle's database session must go with the settle: a session left open
there outlives every test ("database is being accessed by other users" when the test database is
dropped) and, in a worker, holds a Postgres backend for nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from tests.helpers import eventually
from ultimate_jobs import AttemptEnv, JobRun, execute_job, job, system_clock
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def other_sessions() -> set[int]:
    """The backends connected to the test database other than this thread's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {row[0] for row in cursor.fetchall()}


def test_a_timed_out_job_leaves_no_database_session_behind() -> None:
    clock = system_clock()  # the real timer thread, where the deadline's settle runs
    driver = PostgresDriver(clock=clock)
    set_job_driver(driver)
    try:

        @job(name="timeout.session", idempotency_key=lambda i: "k", tenant="none", timeout="50ms")
        def slow(run: JobRun[Any]) -> None:
            run.signal.wait(10)  # returns when the deadline aborts the run

        before = other_sessions()
        slow.enqueue({})
        [claimed] = driver.claim(queues=["default"], limit=1, worker_id="w1", visibility_timeout_ms=30_000).jobs
        execution = execute_job(claimed, AttemptEnv(driver=driver, clock=clock), handle=slow)
        assert (execution.outcome, execution.code, execution.abandoned) == ("retried", "X_JOB_TIMEOUT", True)
        record = driver.operator.get(claimed.id)  # type: ignore[union-attr]
        assert record is not None and record.last_code == "X_JOB_TIMEOUT"  # the timer thread's settle landed
        eventually(lambda: other_sessions() <= before, timeout=5.0)
    finally:
        registry.unregister("timeout.session")
        set_job_driver(None)
