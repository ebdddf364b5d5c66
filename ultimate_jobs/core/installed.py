"""What this process runs on: the installed driver, clock and event bus, and how each is built when none
is installed.

The job core reads its driver and clock here, never from the settings module: settings sit above the
drivers (they build them), and the core sits below both. The settings module registers how to build each
piece from ``settings.ULTIMATE_JOBS`` when it is imported — ``AppConfig`` does that at start-up — and a
test or ``run_jobs`` installs its own with :func:`set_job_driver` / :func:`set_job_clock`.

>>> from ultimate_jobs.drivers.memory import MemoryDriver
>>> set_job_driver(MemoryDriver())
>>> job_driver().name
'memory'
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import DriverUnavailableError
from .clock import Clock, system_clock

if TYPE_CHECKING:
    from ..contracts.events import EventBus
    from ..contracts.protocol import JobDriver

_lock = threading.Lock()
_driver: JobDriver | None = None
_clock: Clock | None = None
_build_driver: Callable[[], JobDriver] | None = None
_build_event_bus: Callable[[], EventBus] | None = None
_read_database: Callable[[], str] | None = None
_bus: EventBus | None = None

_NOT_SET_UP = (
    "ultimate_jobs has no driver and no settings to build one from: add 'ultimate_jobs' to INSTALLED_APPS "
    "and call django.setup() before enqueueing, or install a driver with set_job_driver()"
)


def register_builders(
    *, driver: Callable[[], JobDriver], event_bus: Callable[[], EventBus], database: Callable[[], str]
) -> None:
    """How to build the driver and the event bus when none is installed, and how to read the jobs
    database's alias (the settings module calls this)."""
    global _build_driver, _build_event_bus, _read_database
    _build_driver, _build_event_bus, _read_database = driver, event_bus, database


def jobs_database() -> str:
    """The Django database alias the jobs tables live in (``ULTIMATE_JOBS['DATABASE']``)."""
    if _read_database is None:
        raise DriverUnavailableError(_NOT_SET_UP, {})
    return _read_database()


def job_driver() -> JobDriver:
    """The process's driver, built from settings on first use; ``X_DRIVER_UNAVAILABLE`` when none can be."""
    global _driver
    with _lock:
        if _driver is None:
            if _build_driver is None:
                raise DriverUnavailableError(_NOT_SET_UP, {})
            _driver = _build_driver()
        return _driver


def set_job_driver(driver: JobDriver | None) -> None:
    """Install ``driver`` for every later enqueue and worker (``None`` rebuilds from settings)."""
    global _driver
    with _lock:
        _driver = driver


def job_clock() -> Clock:
    """The clock every time read goes through (the frozen clock under ``run_jobs``)."""
    return _clock or system_clock()


def set_job_clock(clock: Clock | None) -> None:
    """Install ``clock`` process-wide (``None`` restores the wall clock)."""
    global _clock
    _clock = clock


def event_bus() -> EventBus:
    """The installed bus ``step.wait_for_event`` reads and ``publish_event`` writes. Until
    :func:`set_event_bus` installs one it is built from settings: on the Postgres driver, the Postgres bus
    over the driver's database (every process sees every event); on the SQLite driver, the SQLite bus over
    its database (likewise); otherwise a process-local memory bus."""
    global _bus
    with _lock:
        if _bus is None:
            if _build_event_bus is None:
                raise DriverUnavailableError(_NOT_SET_UP, {})
            _bus = _build_event_bus()
        return _bus


def set_event_bus(bus: EventBus) -> None:
    """Install ``bus`` for every later publish and wait."""
    global _bus
    with _lock:
        _bus = bus


def reset_event_bus() -> None:
    """The test seam: forget every published event (an event stays matchable until it expires, so an
    answer one test published would otherwise resume the next test's wait)."""
    global _bus
    with _lock:
        _bus = None
