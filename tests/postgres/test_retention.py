"""Retention out of the box: the app's own sweep (``x.purge``) and its hourly task over the tables the app
owns — finished rows past their state's retention go with their steps, live and younger rows stay, and
every delete is a bounded batch. Once per driver."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from tests.conftest import AnyJobsEnv
from ultimate_jobs import DEFAULT_PURGE_CRON, JobRun, job
from ultimate_jobs.contracts.jobs import JobState
from ultimate_jobs.core import registry
from ultimate_jobs.errors import InvariantError
from ultimate_jobs.features.retention import RETENTION_JOB, RETENTION_TASK, retention_hourly, retention_sweep
from ultimate_jobs.testing import run_jobs

DAY = 86_400_000
BATCH = 2


@pytest.fixture
def jobs(any_jobs: AnyJobsEnv) -> AnyJobsEnv:
    return any_jobs


def test_the_app_declares_its_sweep_and_an_hourly_task() -> None:
    assert registry.lookup(RETENTION_JOB) is retention_sweep
    assert registry.lookup(RETENTION_TASK) is retention_hourly
    described = retention_hourly.describe()
    assert (described.cron, described.tz, described.jobs) == (DEFAULT_PURGE_CRON, "UTC", (RETENTION_JOB,))
    assert retention_hourly.entries(0) == [(retention_sweep, {})]


def test_a_week_later_finished_rows_past_retention_are_gone_and_live_rows_stay(
    jobs: AnyJobsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    @job(idempotency_key=lambda i: f"ok:{i['n']}", tenant="none", queue="default")
    def finishes(run: JobRun[Any]) -> int:
        return int(run.step.run("work", lambda: run.input["n"]))

    @job(idempotency_key=lambda i: f"dies:{i['n']}", tenant="none", queue="default", retry={"attempts": 1})
    def dies(run: JobRun[Any]) -> None:
        run.step.run("work", lambda: 1)
        raise InvariantError("broken for good", {})

    done = [finishes.enqueue({"n": n}).id for n in range(5)]
    dead = dies.enqueue({"n": 0}).id
    run_jobs(jobs.driver, clock=jobs.clock)
    jobs.clock.advance(7 * DAY + 60_000)  # a simulated week (and a minute)
    late = finishes.enqueue({"n": 99}).id
    run_jobs(jobs.driver, clock=jobs.clock)
    live = finishes.enqueue({"n": 100}, delay="60d").id

    limits: list[int] = []
    answers: list[int] = []
    purge_finished = jobs.driver.purge_finished

    def spy(*, before_ms: dict[JobState, int], limit: int) -> int:
        limits.append(limit)
        answers.append(purge_finished(before_ms=before_ms, limit=limit))
        return answers[-1]

    monkeypatch.setattr(jobs.driver, "purge_finished", spy)
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory", "RETENTION": {"BATCH": BATCH}}):
        sweep = retention_sweep.enqueue({})
        run_jobs(jobs.driver, clock=jobs.clock, advance=False)

    operator_store = jobs.driver.operator
    assert all(operator_store.get(job_id) is None for job_id in done)
    assert all(operator_store.steps(job_id) == [] for job_id in done)
    kept = {dead: "dead", late: "done", live: "delayed", sweep.id: "done"}
    assert {job_id: operator_store.get(job_id).state for job_id in kept} == kept
    assert [s.name for s in operator_store.steps(dead)] == ["work"]
    assert limits == [BATCH] * 3 and answers == [2, 2, 1]  # bounded batches until one comes back short
    outputs = {s.name: s.output for s in operator_store.steps(sweep.id)}
    assert outputs["x_jobs"] == 5
    assert set(outputs) >= {"x_jobs", "x_job_events", "x_job_counters", "x_job_rates"}

    jobs.clock.advance(30 * DAY)  # past the dead retention too
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory", "RETENTION": {"BATCH": BATCH}}):
        retention_sweep.enqueue({})
        run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    assert operator_store.get(dead) is None and operator_store.get(late) is None
    assert operator_store.get(live) is not None


def test_a_retention_of_none_keeps_those_rows(jobs: AnyJobsEnv) -> None:
    @job(idempotency_key=lambda i: "kept", tenant="none", queue="default")
    def kept(run: JobRun[Any]) -> None:
        return None

    job_id = kept.enqueue({}).id
    run_jobs(jobs.driver, clock=jobs.clock)
    jobs.clock.advance(365 * DAY)
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory", "RETENTION": {"DONE": None}}):
        retention_sweep.enqueue({})
        run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    assert jobs.driver.operator.get(job_id) is not None
