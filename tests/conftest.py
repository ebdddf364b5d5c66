"""Shared fixtures: a frozen clock, a fresh memory driver, a clean event bus and registry per test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ultimate_jobs import registry
from ultimate_jobs.conf import set_job_clock, set_job_driver
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.events import reset_event_bus, set_event_bus
from ultimate_jobs.events.memory import MemoryEventBus
from ultimate_jobs.testing import FrozenClock


@dataclass
class JobsEnv:
    """What the ``jobs`` fixture installs: the clock, the driver and the bus every enqueue and run uses."""

    clock: FrozenClock
    driver: MemoryDriver
    bus: MemoryEventBus


@pytest.fixture
def jobs() -> Iterator[JobsEnv]:
    """A frozen clock, a memory driver and a memory bus installed process-wide; jobs declared during
    the test are unregistered afterwards so names can be reused."""
    clock = FrozenClock()
    driver = MemoryDriver(clock=clock)
    bus = MemoryEventBus(clock)
    before = {h.name for h in registry.registered()}
    set_job_clock(clock)
    set_job_driver(driver)
    set_event_bus(bus)
    try:
        yield JobsEnv(clock, driver, bus)
    finally:
        for handle in registry.registered():
            if handle.name not in before:
                registry.unregister(handle.name)
        set_job_driver(None)
        set_job_clock(None)
        reset_event_bus()


@pytest.fixture
def retry_table() -> Iterator[None]:
    """Restore the process-wide retry classification table after a test registers codes."""
    from ultimate_jobs import errors

    saved = errors.retry_classes()
    try:
        yield
    finally:
        errors._RETRY.clear()
        errors._RETRY.update(saved)
