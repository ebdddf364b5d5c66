"""The installed driver, clock and bus: the core reads them here, and the settings module registers how to
build each from ``settings.ULTIMATE_JOBS``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ultimate_jobs.conf import build_driver, build_event_bus
from ultimate_jobs.core import installed
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.memory.events import MemoryEventBus
from ultimate_jobs.errors import DriverUnavailableError
from ultimate_jobs.events import event_bus, reset_event_bus


@pytest.fixture
def unregistered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process whose settings module never registered its builders (Django not set up)."""
    monkeypatch.setattr(installed, "_build_driver", None)
    monkeypatch.setattr(installed, "_build_event_bus", None)
    monkeypatch.setattr(installed, "_read_database", None)
    installed.set_job_driver(None)
    reset_event_bus()
    try:
        yield
    finally:
        reset_event_bus()


def test_the_settings_module_registers_how_the_driver_and_the_bus_are_built() -> None:
    assert installed._build_driver is build_driver
    assert installed._build_event_bus is build_event_bus


def test_with_no_settings_registered_the_driver_is_a_coded_error_that_says_what_to_do(unregistered: None) -> None:
    with pytest.raises(DriverUnavailableError) as info:
        installed.job_driver()
    assert info.value.code == "X_DRIVER_UNAVAILABLE"
    assert "INSTALLED_APPS" in str(info.value) and "set_job_driver" in str(info.value)


def test_with_no_settings_registered_the_event_bus_and_the_database_are_the_same_coded_error(
    unregistered: None,
) -> None:
    with pytest.raises(DriverUnavailableError):
        event_bus()
    with pytest.raises(DriverUnavailableError):
        installed.jobs_database()


def test_the_jobs_database_is_read_from_settings(settings: Any) -> None:
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "DATABASE": "default"}
    assert installed.jobs_database() == "default"


def test_an_installed_driver_needs_no_settings(unregistered: None) -> None:
    driver = MemoryDriver()
    installed.set_job_driver(driver)
    try:
        assert installed.job_driver() is driver
    finally:
        installed.set_job_driver(None)


def test_the_memory_settings_build_a_memory_driver_and_a_memory_bus() -> None:
    installed.set_job_driver(None)
    reset_event_bus()
    assert isinstance(installed.job_driver(), MemoryDriver)  # tests.settings: DRIVER "memory"
    assert isinstance(event_bus(), MemoryEventBus)
    installed.set_job_driver(None)
    reset_event_bus()
