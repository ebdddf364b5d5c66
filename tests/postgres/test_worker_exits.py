"""A job's ``BaseException`` in the worker, on every driver (memory, Postgres) and the frozen clock: a body's
``sys.exit()``, ``KeyboardInterrupt`` (off the main thread) and the like fail the attempt and the slot runs
the next job — a thread's slot and the event loop's alike; job code around the body that raises one gives
the lease back at once; and the heartbeat gives back, never renews, the lease of a run whose slot died.
"""

# ruff: noqa: F811 - the worker module's fixtures (jobs, probe, make_worker) are imported, then asked for by name
from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import AnyJobsEnv
from tests.helpers import eventually
from tests.postgres.test_worker import (  # noqa: F401 - fixtures among them
    HEARTBEAT_MS,
    WAIT,
    Probe,
    declare,
    events,
    jobs,
    make_worker,
    probe,
    row,
)
from ultimate_jobs import JobRun
from ultimate_jobs.worker import JobWorker

RETRY = {"attempts": 2, "backoff": "fixed", "delay": "1s", "jitter": False}


def sys_exit(run: JobRun[Any]) -> None:
    sys.exit(3)


def keyboard_interrupt(run: JobRun[Any]) -> None:
    raise KeyboardInterrupt


async def async_sys_exit(run: JobRun[Any]) -> None:
    await asyncio.sleep(0)
    sys.exit(3)


@pytest.mark.parametrize(
    ("body", "raised"),
    [
        pytest.param(sys_exit, "builtins.SystemExit", id="sync sys.exit"),
        pytest.param(keyboard_interrupt, "builtins.KeyboardInterrupt", id="sync KeyboardInterrupt in a slot thread"),
        pytest.param(async_sys_exit, "builtins.SystemExit", id="async sys.exit on the loop"),
    ],
)
def test_a_body_that_raises_a_base_exception_fails_its_attempt_and_its_one_slot_runs_the_next_job(
    jobs: AnyJobsEnv,
    probe: Probe,
    make_worker: Callable[..., JobWorker],
    caplog: pytest.LogCaptureFixture,
    body: Callable[[JobRun[Any]], Any],
    raised: str,
) -> None:
    caplog.set_level(logging.INFO, logger="ultimate_jobs")
    is_async = asyncio.iscoroutinefunction(body)
    exiting = declare("exits_in_body", body, retry=RETRY).enqueue({"k": 1}).id
    jobs.clock.advance(1)
    if is_async:

        async def after(run: JobRun[Any]) -> str:
            probe.enter(run)
            return "ran"

    else:

        def after(run: JobRun[Any]) -> str:  # type: ignore[misc]
            probe.enter(run)
            return "ran"

    behind = declare("behind_the_exit", after).enqueue({"k": 2}).id
    worker = make_worker(concurrency=1, async_concurrency=1)

    assert worker.run_once() == 1
    assert worker.wait_idle(WAIT)
    failed = row(jobs, exiting)
    assert (failed.state, failed.attempts, failed.last_code) == ("ready", 1, "X_JOB_BODY_EXITED")
    assert failed.last_error is not None and raised in failed.last_error
    assert worker.stats.retried == 1

    assert worker.run_once() == 1  # the same one slot takes the job behind it
    probe.started(behind)
    assert worker.wait_idle(WAIT)
    assert row(jobs, behind).state == "done"

    jobs.clock.advance(1_000)  # the retry's delay
    assert worker.run_once() == 1
    assert worker.wait_idle(WAIT)
    dead = row(jobs, exiting)
    assert (dead.state, dead.attempts, dead.last_code) == ("dead", 2, "X_JOB_BODY_EXITED")
    assert (worker.stats.retried, worker.stats.dead, worker.stats.completed) == (1, 1, 1)
    assert len(events(caplog, "jobs.job.body-exited")) == 2
    assert not events(caplog, "jobs.worker.slot-died") and not events(caplog, "jobs.worker.slot-failed")


def test_job_code_around_the_body_that_raises_a_base_exception_gives_the_lease_back_and_the_slot_lives(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ultimate_jobs")
    calls: list[int] = []

    def context() -> dict[str, str]:  # the app's context factory: the first call ends like a bad config's
        calls.append(1)
        if len(calls) == 1:
            sys.exit("no such setting")
        return {"app": "ctx"}

    def body(run: JobRun[Any]) -> int:
        probe.enter(run)
        return run.attempt

    job_id = declare("context_exits", body, retry=RETRY).enqueue({"k": 1}).id
    worker = make_worker(concurrency=1, context=context)

    assert worker.run_once() == 1
    eventually(lambda: not worker.in_flight(), timeout=WAIT)
    given_back = row(jobs, job_id)
    assert given_back.state == "running" and given_back.lease_until_ms == jobs.clock.now_ms()  # ends now
    (died,) = events(caplog, "jobs.worker.slot-died")
    assert died.jobs["name"] == "context_exits" and "SystemExit" in died.jobs["error"]  # type: ignore[attr-defined]

    jobs.clock.advance(1)  # the lease has lapsed: the next claim takes the row again, its attempt spent
    assert worker.run_once() == 1
    probe.started(job_id)
    assert worker.wait_idle(WAIT)
    done = row(jobs, job_id)
    assert (done.state, done.attempts) == ("done", 2)


def test_the_heartbeat_gives_back_the_lease_of_a_run_whose_slot_died_and_the_row_runs_again(
    jobs: AnyJobsEnv, probe: Probe, make_worker: Callable[..., JobWorker], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ultimate_jobs")
    job_id = declare("slot_dies", probe.hold).enqueue({"k": 1}).id
    worker = make_worker(concurrency=2, visibility_timeout="30s")
    assert worker.run_once() == 1
    probe.started(job_id)
    (flight,) = worker.in_flight()
    assert flight.slot_alive is not None and flight.slot_alive()  # the slot thread that runs it
    dead_thread = threading.Thread(target=lambda: None)
    dead_thread.start()
    dead_thread.join()
    flight.slot_alive = dead_thread.is_alive  # as if the slot's thread had ended under the run

    jobs.clock.advance(HEARTBEAT_MS)
    assert worker.in_flight() == []
    given_back = row(jobs, job_id)
    assert given_back.lease_until_ms == jobs.clock.now_ms()  # given back, not renewed for another window
    (died,) = events(caplog, "jobs.worker.slot-died")
    assert died.jobs["name"] == "slot_dies" and died.jobs["why"] == "its slot is no longer alive"  # type: ignore[attr-defined]

    jobs.clock.advance(1)  # the lease has lapsed: the next claim takes the row again, its attempt spent
    with probe._cond:
        probe.runs.clear()
    assert worker.run_once() == 1
    (again,) = probe.started(job_id)
    assert again.attempt == 2
    probe.release(job_id)  # both bodies return: the abandoned one's settle is fenced off by the new claim
    assert worker.wait_idle(WAIT)
    done = row(jobs, job_id)
    assert (done.state, done.attempts) == ("done", 2)
    assert worker.stats.completed == 1
