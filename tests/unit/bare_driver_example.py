"""The driver without an operator store that docs/conformance.md shows (its name keeps it out of the suite's
own collection: tests/unit/test_bare_driver_example.py runs it as the page does, and reads what it
skips); the last test pins the page's code to this file's."""

import pytest

from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.testing.conformance import DriverConformance, DriverFactory


class BareDriver:
    """The queue without an operator store, leases or scheduler storage."""

    name = "bare"
    supports_listen = False
    operator = None
    leases = None
    leader = None
    scheduler_state = None
    backfills = None

    def __init__(self, clock):
        self._inner = MemoryDriver(clock=clock)

    def __getattr__(self, attr):  # enqueue, claim, ack, nack, heartbeat, save_step, stats, close
        return getattr(self._inner, attr)

    @property
    def fair_queues(self):  # set by the fairness scenarios: the inner driver enqueues and claims by it
        return self._inner.fair_queues

    @fair_queues.setter
    def fair_queues(self, queues):
        self._inner.fair_queues = queues


class TestBareDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self) -> DriverFactory:
        return BareDriver


def test_the_page_shows_this_files_code() -> None:
    import pathlib  # here, so the file's top is the page's code line for line

    here = pathlib.Path(__file__)
    page = (here.resolve().parents[2] / "docs" / "conformance.md").read_text()
    head = "```python\n# tests/unit/bare_driver_example.py\n"
    shown = page[page.index(head) + len(head) :]
    assert shown[: shown.index("```")] in here.read_text()
