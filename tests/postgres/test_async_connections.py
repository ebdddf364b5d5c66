"""Async bodies using Django's async ORM hold no database session per job.

Under ``run_jobs`` an async attempt's driver calls and its ORM calls run on the calling thread, on its one
connection. On a started lane (the worker's) they run on the lane's few offload threads and its one ORM
thread: a bounded number of sessions however many jobs are in flight, all closed when the lane stops.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from tests.conftest import ON_POSTGRES, AnyJobsEnv
from tests.helpers import eventually
from tests.secapp.models import Post
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.execute import AttemptEnv
from ultimate_jobs.core.execute_async import execute_job_async
from ultimate_jobs.runtime.async_lane import AsyncLane
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres]
postgres_only = pytest.mark.parametrize("any_jobs", [pytest.param("postgres", marks=ON_POSTGRES)], indirect=True)


def other_sessions() -> set[int]:
    """The backends connected to the test database other than this thread's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {row[0] for row in cursor.fetchall()}


def declare_orm_job(seen: list[int]) -> Any:
    @job(name="async.orm", idempotency_key=lambda i: str(i["n"]), tenant="none", queue="async-orm")
    async def write_and_read(run: JobRun[Any]) -> int:
        post = await Post.objects.acreate(title=f"post {run.input['n']}")
        found = await Post.objects.filter(pk=post.pk).aexists()
        if run.input["n"] % 50 == 0:  # look at the sessions from inside the run, mid-drain
            seen.append(len(await sync_to_async(other_sessions)()))
        return int(found)

    return write_and_read


@postgres_only
def test_500_async_orm_jobs_through_run_jobs_open_no_session(any_jobs: AnyJobsEnv) -> None:
    seen: list[int] = []
    handle = declare_orm_job(seen)
    before = other_sessions()
    for n in range(500):
        handle.enqueue({"n": n})
    report = run_jobs(any_jobs.driver, clock=any_jobs.clock, queues=["async-orm"], batch=50)
    assert report.outcomes == {"completed": 500}
    assert Post.objects.filter(title__startswith="post ").count() == 500
    assert seen and max(seen) <= len(before)  # no session beside the caller's, at any point
    assert other_sessions() <= before


@postgres_only
def test_async_orm_jobs_in_flight_on_a_started_lane_share_a_bounded_set_of_sessions(any_jobs: AnyJobsEnv) -> None:
    seen: list[int] = []
    handle = declare_orm_job(seen)
    before = other_sessions()
    for n in range(300):
        handle.enqueue({"n": n})
    driver = any_jobs.driver
    env = AttemptEnv(driver=driver, clock=any_jobs.clock)
    lane = AsyncLane(name="async-orm", offload_threads=4, orm_threads=3)
    lane.start()
    try:
        claimed = driver.claim(queues=["async-orm"], limit=300, worker_id="w1", visibility_timeout_ms=60_000).jobs
        assert len(claimed) == 300
        futures = [
            lane.submit(lambda job=job: execute_job_async(job, env, lane=lane, handle=handle)) for job in claimed
        ]
        outcomes = [future.result(timeout=60).outcome for future in futures]
    finally:
        lane.stop(wait=True, timeout=30)
    assert outcomes == ["completed"] * 300
    # the lane's 4 offload threads and its 3 ORM threads, at most, whatever the number in flight
    assert seen and max(seen) <= len(before) + 4 + 3
    eventually(lambda: other_sessions() <= before, timeout=5.0)  # closed by the lane's stop
