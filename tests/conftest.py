"""Shared fixtures: a frozen clock, a fresh driver (memory, or either driver for ``any_jobs``), a clean
event bus and registry per test."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Generic, TypeVar

import pytest
from django.db import connection, connections
from django.test import TransactionTestCase

from tests import db_flush
from tests.helpers import forget_children, started_children
from ultimate_jobs.core import registry
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.memory.events import MemoryEventBus
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.wake import start_queue_wake
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.django import installed_jobs

D = TypeVar("D", bound=MemoryDriver | PostgresDriver)

db_flush.install()  # a transactional test's teardown empties only the tables it wrote (tests/db_flush.py)


@dataclass
class Env(Generic[D]):
    """What a jobs fixture installs: the clock, the driver and the bus every enqueue and run uses."""

    clock: FrozenClock
    driver: D
    bus: MemoryEventBus


JobsEnv = Env[MemoryDriver]  # ``jobs``: the memory driver, whose internals a test may read
AnyJobsEnv = Env[MemoryDriver | PostgresDriver]  # ``any_jobs``: only the driver protocol is fair game


_DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
}


E2E_DIR = Path(__file__).resolve().parent / "e2e"
PROCESS_TEST_SLOTS = 3
"""How many tests that start real processes against the shared Postgres run at once on this machine, across
every run of the suite: each holds tens of connections (a worker's claim loop, heartbeat, wake session and
slots, times its workers), so two runs side by side would otherwise pass the server's max_connections."""
_SLOT_LOCK = 0x756A5F65  # the advisory lock's first key: its second is the slot's number


@pytest.fixture(autouse=True)
def _a_process_test_slot(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test under tests/e2e takes one of :data:`PROCESS_TEST_SLOTS` machine-wide slots (a session advisory
    lock on the server's ``postgres`` database, held by a connection of its own: it ends with this process,
    however it ends) and waits, up to 10 minutes, while every slot is taken."""
    if E2E_DIR not in Path(str(request.node.fspath)).parents:
        yield
        return
    import time

    import psycopg

    holder = psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            taken = [
                holder.execute("SELECT pg_try_advisory_lock(%s, %s)", [_SLOT_LOCK, slot]).fetchone()
                for slot in range(PROCESS_TEST_SLOTS)
            ]
            if any(row and row[0] for row in taken):
                held = [slot for slot, row in enumerate(taken) if row and row[0]]
                for extra in held[1:]:
                    holder.execute("SELECT pg_advisory_unlock(%s, %s)", [_SLOT_LOCK, extra])
                break
            assert time.monotonic() < deadline, "no process-test slot came free in 10 minutes"
            time.sleep(0.2)
        yield
    finally:
        holder.close()


@pytest.fixture(autouse=True)
def _no_connection_left_open_for_a_test_without_the_database(request: pytest.FixtureRequest) -> None:
    """A test without database access starts with this thread's connections closed, so that nothing it
    does reaches a connection an earlier test left open: pytest-django refuses database access in such a
    test only when a connection has to be opened, so whether it noticed would depend on test order."""
    if isinstance(request.instance, TransactionTestCase):  # Django's own TestCase classes hold the database
        return
    if request.node.get_closest_marker("django_db") is None and not _DATABASE_FIXTURES & set(request.fixturenames):
        for conn in connections.all(initialized_only=True):
            conn.close()


@contextmanager
def installed(clock: FrozenClock, driver: D) -> Iterator[Env[D]]:
    """Install ``clock``, ``driver`` and a fresh memory bus process-wide; jobs declared meanwhile are
    unregistered afterwards so names can be reused."""
    with installed_jobs(clock, driver) as bus:
        yield Env(clock, driver, bus)


@pytest.fixture
def jobs() -> Iterator[JobsEnv]:
    """A frozen clock, a memory driver and a memory bus installed process-wide."""
    clock = FrozenClock()
    with installed(clock, MemoryDriver(clock=clock)) as env:
        yield env


# The mark, not a getfixturevalue("transactional_db") in the fixture: pytest-django picks TestCase or
# TransactionTestCase from the marker and the test's static fixture names, so a database requested
# dynamically from inside a fixture would get the rolled-back ``db`` instead.
ON_POSTGRES = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(params=["memory", pytest.param("postgres", marks=ON_POSTGRES)])
def any_jobs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[AnyJobsEnv]:
    """``jobs`` once per driver: the memory driver, then ``PostgresDriver(clock=...)`` on committed rows.

    The Postgres param runs under ``transactional_db`` (tables truncated after the test), not ``db``: a
    worker runs bodies on its own threads with their own connections, which never see the rows of a
    test transaction that is rolled back. Whatever starts threads over this driver (a worker) must be
    stopped before this fixture's teardown, so no connection or LISTEN session outlives the test.
    """
    clock = FrozenClock()
    driver: MemoryDriver | PostgresDriver
    if request.param == "postgres":
        request.getfixturevalue("transactional_db")  # set up already by the mark; named here for the reader
        assert not connection.in_atomic_block, "any_jobs[postgres] needs committed rows: transactional_db, not db"
        # The LISTEN session a subscriber (a worker's start) opens looks up every 20 ms instead of 500, so
        # stopping it — every worker's drain — does not cost half a second per test.
        monkeypatch.setattr(
            "ultimate_jobs.drivers.postgres.driver.start_queue_wake", partial(start_queue_wake, read_timeout_ms=20)
        )
        driver = PostgresDriver(clock=clock)
    else:
        driver = MemoryDriver(clock=clock)
    with installed(clock, driver) as env:
        yield env


@pytest.fixture
def retry_table() -> Iterator[None]:
    """Restore the process-wide retry classification table after a test registers codes."""
    from ultimate_jobs import errors

    saved = errors.retry_classes()
    try:
        yield
    finally:
        # private, and the only way: the public API only adds classifications, and this undoes a test's
        errors._RETRY.clear()
        errors._RETRY.update(saved)


@pytest.fixture
def own_backfills() -> Iterator[None]:
    """Only the backfills this test declares are declared: the ones the installed apps declare at start-up
    (the demo shop's) are unregistered for the test — out of ``registered_backfills()``,
    ``pending_backfills()``, ``jobs_backfill`` and the Backfills page — and registered again after it."""
    from ultimate_jobs.features.backfills import is_backfill

    hidden = [h for h in registry.registered("job") if is_backfill(h)]
    for handle in hidden:
        registry.unregister(handle.name)
    try:
        yield
    finally:
        for handle in hidden:
            registry.register(handle)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/sqlite runs under ``--ds=tests.sqlite_settings`` only (``make test`` runs it so); under the
    Postgres settings its modules are not collected."""
    if collection_path.name == "sqlite" and collection_path.parent == Path(__file__).parent:
        from django.conf import settings

        return settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3"
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist the tests marked ``slow`` (more than two seconds; a few take a minute) are handed
    out first, so that the run does not end on one worker alone with a long test the others finished
    their share beside. Every worker sorts its collection alike (a stable sort), as xdist requires."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    forget_children()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report shows the output of every process it started (``tests.helpers.Child``):
    its exit, its last stdout lines and its stderr tail, each in a section of its own."""
    report = yield
    if report.failed:
        for child in started_children():
            report.sections.append((f"child {child.name} ({call.when})", child.output()))
    return report
