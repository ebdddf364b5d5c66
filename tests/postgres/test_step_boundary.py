"""What a run stores — a step's name and output, a progress note — that no database can hold is refused on
the attempt it happens, terminally (``X_INVARIANT``): dead-lettered on attempt 1, never retried into the
dead-letter queue attempt by attempt. On the memory driver and on Postgres (``any_jobs``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import AnyJobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.guards.admission import MAX_JSON_DEPTH
from ultimate_jobs.testing import run_jobs

NUL = "\u0000"


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


BODIES: dict[str, Callable[[JobRun[Any]], Any]] = {
    "a NUL byte in a step output": lambda run: run.step.run("fetch", lambda: {"name": f"a{NUL}b"}),
    "a NUL byte in a step output's key": lambda run: run.step.run("fetch", lambda: {f"k{NUL}": 1}),
    "a step output nested 1,000 deep": lambda run: run.step.run("fetch", lambda: nested(1_000)),
    "a step output one level too deep": lambda run: run.step.run("fetch", lambda: nested(MAX_JSON_DEPTH + 1)),
    "a NUL byte in a step name": lambda run: run.step.run(f"fetch{NUL}", lambda: 1),
    "a NUL byte in a progress note": lambda run: run.progress(1, 2, note=f"half{NUL}way"),
    "a progress of NaN": lambda run: run.progress(float("nan")),
    "a progress note of a megabyte": lambda run: run.progress(1, note="x" * 1_000_000),
}


@pytest.mark.parametrize("why", list(BODIES))
def test_what_no_database_can_store_dead_letters_on_attempt_one(any_jobs: AnyJobsEnv, why: str) -> None:
    @job(name="store_it", idempotency_key=lambda i: "k", tenant="none", retry={"attempts": 5, "delay": 0})
    def store_it(run: JobRun[Any]) -> None:
        BODIES[why](run)

    queued = store_it.enqueue({})
    run_jobs(clock=any_jobs.clock)
    assert any_jobs.driver.operator is not None
    row = any_jobs.driver.operator.get(queued.id)
    assert row is not None
    assert (row.state, row.attempts) == ("dead", 1), row
    assert "X_INVARIANT" in (row.last_error or "")


def test_a_step_output_at_the_depth_limit_is_stored_and_replayed(any_jobs: AnyJobsEnv) -> None:
    seen: list[Any] = []

    @job(name="deep_enough", idempotency_key=lambda i: "k", tenant="none")
    def deep_enough(run: JobRun[Any]) -> None:
        seen.append(run.step.run("fetch", lambda: nested(MAX_JSON_DEPTH - 1)))
        run.step.sleep("pause", "1s")

    deep_enough.enqueue({})
    run_jobs(clock=any_jobs.clock)
    assert seen == [nested(MAX_JSON_DEPTH - 1)] * 2  # ran, then replayed after the sleep
