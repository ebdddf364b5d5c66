"""``run.step.atomic`` on the SQLite driver: the cases of :mod:`tests.step_atomic_cases` (the same run on
Postgres in tests/postgres/test_step_atomic.py), with this directory's ``any_jobs``, and what SQLite's one
write lock does to a claim made while the step's transaction is open."""

from __future__ import annotations

import threading
from typing import Any

from django.contrib.auth.models import Group
from django.db import connections

from tests.conftest import AnyJobsEnv
from tests.step_atomic_cases import *  # noqa: F403  (the cases, their fixtures and helpers)
from tests.step_atomic_cases import WAIT, declare, groups, row, steal, steps
from ultimate_jobs import JobRun
from ultimate_jobs.testing import run_jobs


def test_a_claim_made_inside_the_step_waits_for_its_commit_and_replays_it(any_jobs: AnyJobsEnv) -> None:
    """On SQLite (``transaction_mode: IMMEDIATE``) the step's transaction holds the one write lock from
    its start, so a lease cannot be lost in the middle of it: another worker's claim waits until the step
    committed its write and checkpoint together, takes the job over, and replays the checkpoint — the
    write stays single. (A lease lost before the step opens is the shared case.)"""
    clock = any_jobs.clock
    taken: list[Any] = []
    thief = threading.Thread(target=lambda: (taken.extend(steal(any_jobs).jobs), connections.close_all()))

    def mark_paid(run: JobRun[Any]) -> str:
        if run.attempt == 1:  # paused past its lease inside the transaction; the thief's claim waits on it
            clock.advance(any_jobs.driver.visibility_timeout_ms + 1)
            thief.start()
        Group.objects.create(name=f"order-8:attempt-{run.attempt}")
        return f"paid on attempt {run.attempt}"

    def body(run: JobRun[Any]) -> str:
        answer: str = run.step.atomic("mark-paid", lambda: mark_paid(run))
        if run.attempt == 1:
            thief.join(WAIT)  # the step has committed: the thief's claim goes through now
            assert not thief.is_alive(), "the thief's claim never went through"
        return answer

    queued = declare("pay_locked", body).enqueue({"k": 1})
    run_jobs(clock=clock, advance=False)

    assert [j.id for j in taken] == [queued.id]
    assert [s.name for s in taken[0].steps] == ["mark-paid"]  # the thief found the committed checkpoint
    assert (row(any_jobs, queued.id).worker_id, groups()) == ("thief", ["order-8:attempt-1"])

    clock.advance(any_jobs.driver.visibility_timeout_ms + 1)  # the thief never settles: the next run replays
    run_jobs(clock=clock)
    assert row(any_jobs, queued.id).state == "done"
    assert groups() == ["order-8:attempt-1"]
    assert steps(any_jobs, queued.id)["mark-paid"].output == "paid on attempt 1"
