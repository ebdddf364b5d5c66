"""Jobs in a Django test: :class:`JobsTestCase` for ``manage.py test`` and the ``jobs_queue`` pytest
fixture, each installing a memory driver, a frozen clock and a memory event bus, and tearing them down.

>>> class SignupTests(JobsTestCase, TestCase):
...     def test_welcome_is_sent(self):
...         signup("ada@example.com")
...         report = self.run_jobs()
...         self.assertEqual(report.outcomes["completed"], 1)

With pytest: ``pytest_plugins = ["ultimate_jobs.testing.django"]`` in ``conftest.py``, then
``def test_welcome(jobs_queue): ...; jobs_queue.run_jobs()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..contracts.protocol import JobDriver
from ..core import registry
from ..core.installed import set_job_clock, set_job_driver
from ..drivers.memory import MemoryDriver
from ..drivers.memory.events import MemoryEventBus
from ..events import reset_event_bus, set_event_bus
from .clock import FrozenClock
from .runner import RunReport, run_jobs

try:
    import pytest
except ImportError:  # pytest is the [testing] extra; JobsTestCase needs none
    pytest = None  # type: ignore[assignment]

__all__ = ["JobsQueue", "JobsTestCase", "installed_jobs", "jobs_queue"]


@contextmanager
def installed_jobs(clock: FrozenClock, driver: JobDriver) -> Iterator[MemoryEventBus]:
    """Install ``clock``, ``driver`` and a fresh memory event bus process-wide for the block (yielded: the
    bus); put the configured ones back after it and forget the jobs declared meanwhile, so a name can be
    declared again.

    >>> with installed_jobs(clock, PostgresDriver(clock=clock)) as bus:
    ...     report = run_jobs(clock=clock)
    """
    bus = MemoryEventBus(clock)
    before = {h.name for h in registry.registered()}
    set_job_clock(clock)
    set_job_driver(driver)
    set_event_bus(bus)
    try:
        yield bus
    finally:
        for handle in registry.registered():
            if handle.name not in before:
                registry.unregister(handle.name)
        set_job_driver(None)
        set_job_clock(None)
        reset_event_bus()


@dataclass
class JobsQueue:
    """What is installed for one test: the clock, the memory driver and the event bus."""

    clock: FrozenClock
    driver: MemoryDriver
    bus: MemoryEventBus
    _before: set[str] = field(default_factory=set)

    @classmethod
    def install(cls) -> JobsQueue:
        """Install a frozen clock, a memory driver on it and a memory bus, process-wide."""
        clock = FrozenClock()
        queue = cls(clock, MemoryDriver(clock=clock), MemoryEventBus(clock), {h.name for h in registry.registered()})
        set_job_clock(queue.clock)
        set_job_driver(queue.driver)
        set_event_bus(queue.bus)
        return queue

    def uninstall(self) -> None:
        """Put the configured driver, the system clock and the default bus back; forget jobs declared since."""
        for handle in registry.registered():
            if handle.name not in self._before:
                registry.unregister(handle.name)
        set_job_driver(None)
        set_job_clock(None)
        reset_event_bus()

    def run_jobs(self, **options: Any) -> RunReport:
        """:func:`~ultimate_jobs.testing.run_jobs` on this driver and clock."""
        return run_jobs(self.driver, clock=self.clock, **options)


class JobsTestCase:
    """A mixin for a Django ``TestCase``/``SimpleTestCase``: ``self.jobs`` is a :class:`JobsQueue`
    installed in ``setUp`` and removed by a cleanup; ``self.run_jobs()`` runs what was enqueued."""

    jobs: JobsQueue

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.jobs = JobsQueue.install()
        self.addCleanup(self.jobs.uninstall)  # type: ignore[attr-defined]

    def run_jobs(self, **options: Any) -> RunReport:
        """Run every enqueued job (the clock jumps over retries and sleeps)."""
        return self.jobs.run_jobs(**options)


if pytest is not None:

    @pytest.fixture
    def jobs_queue() -> Iterator[JobsQueue]:
        """A :class:`JobsQueue` installed for the test and removed after it."""
        queue = JobsQueue.install()
        try:
            yield queue
        finally:
            queue.uninstall()
