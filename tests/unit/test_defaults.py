"""One source for every default (``ultimate_jobs.defaults``), and one lease window per driver: the
settings, the drivers and ``job_worker()`` all read the same constants, ``VISIBILITY_TIMEOUT`` reaches the
driver the settings build (memory too), and a worker leases on its driver's window — a different
``visibility_timeout`` is refused, not left to disagree with the window the driver expires workers on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from tests.conftest import JobsEnv
from ultimate_jobs.conf import Retention, build_driver, jobs_settings
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.defaults import (
    DEFAULT_DRAIN_DEADLINE_MS,
    DEFAULT_REDIS_URL,
    DEFAULT_VISIBILITY_TIMEOUT_MS,
    PURGE_BATCH,
)
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.errors import InvariantError
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.worker import job_worker
from ultimate_jobs.worker.boot import worker_from_settings


@pytest.fixture
def settings_driver() -> Iterator[None]:
    """``job_driver()`` rebuilt from the settings of the test, and forgotten after it."""
    set_job_driver(None)
    try:
        yield
    finally:
        set_job_driver(None)


def test_unset_keys_take_the_defaults_module_values() -> None:
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory"}):
        config = jobs_settings()
    assert config.visibility_timeout_ms == DEFAULT_VISIBILITY_TIMEOUT_MS == 30_000
    assert config.drain_deadline_ms == DEFAULT_DRAIN_DEADLINE_MS == 25_000
    assert config.redis_url == DEFAULT_REDIS_URL
    assert config.retention == Retention() and config.retention.batch == PURGE_BATCH


def test_a_driver_and_a_worker_built_with_nothing_said_agree_with_the_settings() -> None:
    driver = MemoryDriver(clock=FrozenClock())
    worker = job_worker(driver=driver, context=lambda: None, queues=["q"], clock=driver.clock)
    assert driver.visibility_timeout_ms == worker.visibility_timeout_ms == DEFAULT_VISIBILITY_TIMEOUT_MS
    assert worker.drain_deadline_ms == DEFAULT_DRAIN_DEADLINE_MS


def test_the_settings_window_reaches_the_memory_driver_and_its_worker(settings_driver: None) -> None:
    with override_settings(ULTIMATE_JOBS={"DRIVER": "memory", "VISIBILITY_TIMEOUT": "45s"}):
        assert build_driver().visibility_timeout_ms == 45_000
        worker = worker_from_settings(queues=["q"])
    assert worker.driver.visibility_timeout_ms == worker.visibility_timeout_ms == 45_000
    assert worker.heartbeat_interval_ms == 15_000


def test_a_worker_takes_its_drivers_window() -> None:
    driver = MemoryDriver(clock=FrozenClock(), visibility_timeout_ms=45_000)
    worker = job_worker(driver=driver, context=lambda: None, queues=["q"], clock=driver.clock)
    assert (worker.visibility_timeout_ms, worker.heartbeat_interval_ms) == (45_000, 15_000)
    same = job_worker(driver=driver, context=lambda: None, queues=["q"], clock=driver.clock, visibility_timeout="45s")
    assert same.visibility_timeout_ms == 45_000


def test_a_visibility_timeout_that_differs_from_the_drivers_window_is_refused() -> None:
    driver = MemoryDriver(clock=FrozenClock(), visibility_timeout_ms=45_000)
    with pytest.raises(InvariantError) as refused:
        job_worker(driver=driver, context=lambda: None, queues=["q"], visibility_timeout="10s")
    assert refused.value.code == "X_INVARIANT"
    assert refused.value.meta == {"field": "visibility_timeout", "value": 10_000, "driver_window": 45_000}
    assert "build the driver with visibility_timeout_ms=10000" in refused.value.message


def test_a_job_that_declares_no_event_poll_waits_on_the_defaults_module_interval(jobs: JobsEnv) -> None:
    from ultimate_jobs import JobRun, job
    from ultimate_jobs.defaults import DEFAULT_EVENT_POLL_MS

    @job(name="default-poll", idempotency_key=lambda i: "k", tenant="none")
    def default_poll(run: JobRun[object]) -> None:
        return None

    assert default_poll.describe().event_poll_ms == DEFAULT_EVENT_POLL_MS == 30_000
