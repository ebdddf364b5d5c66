"""A worker leases and renews on its driver's window, on every driver (memory, Postgres): a driver
built with a 45 s window gets claims leased for 45 s and renewed every 15 s — the worker's
``visibility_timeout`` and the driver's are one value."""

from __future__ import annotations

import threading
from typing import Any

from tests.conftest import AnyJobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.worker import job_worker

WAIT = 5.0  # the bound on every cross-thread wait; a passing test never spends it
WINDOW = 45_000


def lease_of(driver: MemoryDriver | PostgresDriver, job_id: str) -> int | None:
    record = driver.operator.get(job_id)
    assert record is not None
    return record.lease_until_ms


def test_a_worker_leases_and_renews_on_its_drivers_window(any_jobs: AnyJobsEnv) -> None:
    clock = any_jobs.clock
    driver = type(any_jobs.driver)(clock=clock, visibility_timeout_ms=WINDOW)
    set_job_driver(driver)  # the fixture's teardown uninstalls it
    started, gate = threading.Event(), threading.Event()

    @job(name="windowed", idempotency_key=lambda i: "k", tenant="none")
    def windowed(run: JobRun[Any]) -> None:
        started.set()
        gate.wait(WAIT)

    worker = job_worker(
        driver=driver, context=lambda: None, queues=["default"], clock=clock, concurrency=1, claim_ahead=0
    )
    assert (worker.visibility_timeout_ms, worker.heartbeat_interval_ms) == (WINDOW, WINDOW // 3)
    worker.start(loop=False)
    try:
        job_id = windowed.enqueue({}).id
        claimed_at = clock.now_ms()
        worker.run_once()
        assert started.wait(WAIT)
        assert lease_of(driver, job_id) == claimed_at + WINDOW
        clock.advance(WINDOW // 3)  # the heartbeat fires on this thread
        assert lease_of(driver, job_id) == claimed_at + WINDOW // 3 + WINDOW
        assert [w.id for w in driver.operator.workers()] == [worker.worker_id]
    finally:
        gate.set()
        assert worker.drain(deadline_ms=int(WAIT * 1000)) is True
