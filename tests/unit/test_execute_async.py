"""What an ``async def`` body adds to one attempt beyond the conformance scenarios: where its parts run,
its scope, progress, hooks of either kind on either kind of body, and ``execute_job`` handed one."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pydantic
import pytest

from tests.conftest import JobsEnv
from ultimate_jobs import AttemptEnv, JobRun, Settled, current_signal, execute_job, job
from ultimate_jobs.core.execute import is_async_job
from ultimate_jobs.core.execute_async import execute_job_async
from ultimate_jobs.core.scope import current_tenant
from ultimate_jobs.runtime.async_lane import AsyncLane
from ultimate_jobs.testing import run_jobs


class OrgIn(pydantic.BaseModel):
    org_id: str


def test_an_async_body_runs_on_the_loop_under_its_tenant_and_signal(jobs: JobsEnv) -> None:
    seen: dict[str, Any] = {}

    def sync_step() -> str:
        seen["sync step thread"] = threading.current_thread().name
        seen["sync step tenant"] = current_tenant()
        return "s"

    async def body(run: JobRun[OrgIn]) -> str:
        seen["body thread"] = threading.current_thread().name
        seen["tenant"] = current_tenant()
        seen["signal"] = current_signal() is run.signal
        return str(await run.step.run("sync", sync_step))

    handle = job(input=OrgIn, idempotency_key=lambda i: "k", tenant=lambda i: i.org_id)(body)
    assert handle.is_async and is_async_job(handle)
    handle.enqueue({"org_id": "org-1"})
    report = run_jobs(jobs.driver, clock=jobs.clock)
    assert report.outcomes == {"completed": 1}
    here = threading.current_thread().name
    assert seen["body thread"].endswith("-loop") and seen["body thread"] != here
    assert seen["sync step thread"] == here  # a plain step function runs off the loop: run_jobs's thread
    assert (seen["tenant"], seen["sync step tenant"], seen["signal"]) == ("org-1", "org-1", True)


def test_progress_from_an_async_body_is_written_off_the_loop(jobs: JobsEnv) -> None:
    async def body(run: JobRun[Any]) -> None:
        for done in range(3):
            run.progress(done, 3, f"row {done}")
            jobs.clock.advance(1_000)
            await asyncio.sleep(0)

    queued = job(idempotency_key=lambda i: "k", tenant="none")(body).enqueue({})
    run_jobs(jobs.driver, clock=jobs.clock)
    row = jobs.driver.operator.get(queued.id)
    assert row is not None and row.progress is not None and row.progress.note == "row 2"


def test_a_plain_on_settled_hears_an_async_body_and_an_async_one_hears_a_sync_body(jobs: JobsEnv) -> None:
    heard: list[tuple[str, str, Any]] = []

    def plain(settled: Settled) -> None:
        heard.append(("plain", settled.outcome, settled.result))

    async def awaited(settled: Settled) -> None:
        await asyncio.sleep(0)
        heard.append(("async", settled.outcome, settled.result))

    async def async_body(run: JobRun[Any]) -> int:
        return 1

    def sync_body(run: JobRun[Any]) -> int:
        return 2

    job(name="a", idempotency_key=lambda i: "k", tenant="none", on_settled=plain)(async_body).enqueue({})
    job(name="s", idempotency_key=lambda i: "k", tenant="none", on_settled=awaited)(sync_body).enqueue({})
    run_jobs(jobs.driver, clock=jobs.clock)
    assert sorted(heard) == [("async", "completed", 2), ("plain", "completed", 1)]


def test_an_async_on_settled_that_keeps_throwing_is_tried_three_times_and_reported(jobs: JobsEnv) -> None:
    calls: list[int] = []

    async def hook(settled: Settled) -> None:
        calls.append(1)
        raise RuntimeError("hook down")

    async def body(run: JobRun[Any]) -> None:
        return None

    job(idempotency_key=lambda i: "k", tenant="none", on_settled=hook)(body).enqueue({})
    [execution] = run_jobs(jobs.driver, clock=jobs.clock).executions
    assert len(calls) == 3
    assert execution.on_settled_error is not None and execution.on_settled_error.code == "X_JOB_ON_SETTLED_FAILED"


def test_execute_job_handed_an_async_body_runs_it_on_a_lane_of_its_own(jobs: JobsEnv) -> None:
    async def body(run: JobRun[Any]) -> str:
        await asyncio.sleep(0)
        return "ran"

    job(idempotency_key=lambda i: "k", tenant="none")(body).enqueue({})
    [claimed] = jobs.driver.claim(queues=["default"], limit=1, worker_id="w1").jobs
    before = threading.active_count()
    execution = execute_job(claimed, AttemptEnv(driver=jobs.driver, clock=jobs.clock, rng=random.Random(0)))
    assert (execution.outcome, execution.result) == ("completed", "ran")
    assert threading.active_count() == before  # the lane stopped and joined its threads


def test_many_async_attempts_wait_at_once_on_a_started_lane(jobs: JobsEnv) -> None:
    """50 bodies each waiting on one shared gate: they can only finish if all of them are in flight at once."""
    gate = asyncio.Event()
    arrived: list[str] = []

    async def body(run: JobRun[Any]) -> str:
        arrived.append(run.job_id)
        if len(arrived) == 50:
            gate.set()
        await gate.wait()
        return "through"

    handle = job(idempotency_key=lambda i: str(i["n"]), tenant="none")(body)
    for n in range(50):
        handle.enqueue({"n": n})
    claimed = jobs.driver.claim(queues=["default"], limit=50, worker_id="w1").jobs
    env = AttemptEnv(driver=jobs.driver, clock=jobs.clock)
    lane = AsyncLane(name="many")
    lane.start()
    try:
        futures = [lane.submit(lambda c=c: execute_job_async(c, env, lane=lane)) for c in claimed]
        assert [f.result(timeout=30).outcome for f in futures] == ["completed"] * 50
    finally:
        lane.stop(wait=False)


@pytest.mark.parametrize("field", ["idempotency_key", "tenant"])
def test_the_async_refusal_still_names_the_field_an_async_body_cannot_change(jobs: JobsEnv, field: str) -> None:
    async def key(value: Any) -> str:
        return "k"

    async def body(run: JobRun[Any]) -> None:
        return None

    options: dict[str, Any] = {"idempotency_key": lambda i: "k", "tenant": "none", field: key}
    with pytest.raises(Exception) as refused:
        job(**options)(body)
    assert getattr(refused.value, "code", None) == "X_JOB_ASYNC_UNSUPPORTED"
