"""``purge()``: one step per target, so a killed pass resumes at the table it stopped on; one clock
reading per pass; two targets under one name refused before the first delete. Once per driver."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.conftest import AnyJobsEnv
from ultimate_jobs import DEFAULT_PURGE_CRON, PurgeTarget, next_task_run, purge, task
from ultimate_jobs.testing import run_jobs

NO_JITTER = {"attempts": 3, "delay": 1000, "jitter": False}


@pytest.fixture
def jobs(any_jobs: AnyJobsEnv) -> AnyJobsEnv:
    return any_jobs


def test_a_pass_killed_after_the_first_target_resumes_at_the_second(jobs: AnyJobsEnv) -> None:
    calls: list[tuple[str, int]] = []
    landed: Counter[str] = Counter()
    failures = {"b": 1}  # the second target raises once: the pass dies after the first table

    def target(name: str, removed: int) -> PurgeTarget:
        def purge_expired(now_ms: int) -> int:
            calls.append((name, now_ms))
            if failures.get(name):
                failures[name] -= 1
                raise RuntimeError(f"{name}: connection lost mid-pass")
            landed[name] += 1
            return removed

        return PurgeTarget(name, purge_expired)

    sweep = purge(
        name="test.purge.resume", targets=lambda: [target("a", 3), target("b", 0), target("c", 7)], retry=NO_JITTER
    )
    queued = sweep.enqueue({})
    report = run_jobs(jobs.driver, clock=jobs.clock)
    assert report.outcomes["retried"] == 1 and report.outcomes["completed"] == 1
    assert [name for name, _ in calls] == ["a", "b", "b", "c"]  # the retry starts at b, not at a
    assert landed == {"a": 1, "b": 1, "c": 1}
    first, second = calls[1][1], calls[2][1]
    assert second == first + 1000  # one reading per pass: the retry reads the clock once more
    assert calls[2][1] == calls[3][1]  # ... and hands that one reading to every target it runs
    row = jobs.driver.operator.get(queued.id)
    assert row is not None and row.state == "done"
    steps = {s.name: s.output for s in jobs.driver.operator.steps(queued.id)}
    assert steps == {"a": 3, "b": 0, "c": 7}


def test_two_targets_under_one_name_are_refused_before_any_delete(jobs: AnyJobsEnv) -> None:
    deleted: list[str] = []

    def delete(name: str) -> PurgeTarget:
        return PurgeTarget(name, lambda now_ms: deleted.append(name) or 1)

    sweep = purge(
        name="test.purge.duplicate",
        targets=lambda: [delete("x_sessions"), delete("x_tokens"), delete("x_sessions")],
        retry={"attempts": 1},
    )
    queued = sweep.enqueue({})
    run_jobs(jobs.driver, clock=jobs.clock)
    assert deleted == []
    row = jobs.driver.operator.get(queued.id)
    assert row is not None and row.state == "dead" and row.last_code == "X_INVARIANT"
    assert "x_sessions" in (row.last_error or "")


def test_targets_are_read_per_attempt_not_at_declaration(jobs: AnyJobsEnv) -> None:
    stores: list[PurgeTarget] = []
    sweep = purge(name="test.purge.late", targets=lambda: list(stores))
    stores.append(PurgeTarget("x_late", lambda now_ms: 2))  # built after the declaration
    queued = sweep.enqueue({})
    run_jobs(jobs.driver, clock=jobs.clock)
    assert {s.name: s.output for s in jobs.driver.operator.steps(queued.id)} == {"x_late": 2}


def test_the_default_purge_cron_fires_hourly(jobs: AnyJobsEnv) -> None:
    sweep = purge(name="test.purge.hourly", targets=lambda: [])

    @task(cron=DEFAULT_PURGE_CRON, tz="UTC", name="test.purge.hourly.task")
    def hourly(occurrence_ms: int) -> list[tuple[Any, Any]]:
        return [(sweep, {})]

    assert hourly.describe().jobs == ("test.purge.hourly",)
    hour = 3_600_000
    assert next_task_run(hourly, 5 * hour) == 6 * hour
    assert next_task_run(hourly, 5 * hour + 1) == 6 * hour


def test_a_target_must_answer_a_count(jobs: AnyJobsEnv) -> None:
    sweep = purge(
        name="test.purge.count",
        targets=lambda: [PurgeTarget("x_bad", lambda now_ms: None)],  # type: ignore[arg-type,return-value]
        retry={"attempts": 1},
    )
    queued = sweep.enqueue({})
    run_jobs(jobs.driver, clock=jobs.clock)
    row = jobs.driver.operator.get(queued.id)
    assert row is not None and row.state == "dead" and row.last_code == "X_INVARIANT"
