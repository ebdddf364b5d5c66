"""``run.step.atomic`` on the Postgres driver: the cases of :mod:`tests.step_atomic_cases` (the same run on
SQLite in tests/sqlite/test_step_atomic_sqlite.py), and the lease lost in the middle of the step, which only
Postgres allows (another worker can claim while the step's transaction is open)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group

from tests.conftest import ON_POSTGRES, AnyJobsEnv
from tests.step_atomic_cases import *  # noqa: F403  (the cases, their fixtures and helpers)
from tests.step_atomic_cases import assert_taken_over, assert_the_new_owner_counts, declare, on_another_thread, steal
from ultimate_jobs import JobRun
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.parametrize("any_jobs", [pytest.param("postgres", marks=ON_POSTGRES)], indirect=True)]


def test_a_worker_that_lost_the_claim_inside_the_step_cannot_commit(any_jobs: AnyJobsEnv) -> None:
    """The lease lapses while the step's transaction is open and another worker claims the job (the claim
    skips no lock: the step holds none until its checkpoint write): the late worker's checkpoint cannot
    land, so its write rolls back with it; the new owner's run is the one that counts."""
    clock = any_jobs.clock
    taken: list[Any] = []

    def mark_paid(run: JobRun[Any]) -> str:
        if run.attempt == 1:  # paused past its lease inside the transaction
            clock.advance(any_jobs.driver.visibility_timeout_ms + 1)
            taken.extend(on_another_thread(lambda: steal(any_jobs)).jobs)
        Group.objects.create(name=f"order-5:attempt-{run.attempt}")
        return f"paid on attempt {run.attempt}"

    queued = declare("pay_late", lambda run: run.step.atomic("mark-paid", lambda: mark_paid(run))).enqueue({"k": 1})
    run_jobs(clock=clock, advance=False)
    assert_taken_over(any_jobs, queued.id, taken)
    assert_the_new_owner_counts(any_jobs, queued.id, "order-5")
