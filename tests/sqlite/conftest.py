"""The SQLite half of the suite: run with ``pytest --ds=tests.sqlite_settings tests/sqlite`` (``make test``
does). ``any_jobs`` here is the SQLite driver over the test's frozen clock on committed rows, so a test
module that re-exports the shared driver-agnostic tests (``any_jobs`` users) runs them on SQLite."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.conftest import AnyJobsEnv, installed
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.testing import FrozenClock

ON_SQLITE = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(params=[pytest.param("sqlite", marks=ON_SQLITE)])
def any_jobs(request: pytest.FixtureRequest) -> Iterator[AnyJobsEnv]:
    """``SqliteDriver(clock=...)`` on committed rows (``transactional_db``: a worker's threads open their own
    connections to the file, which never see a rolled-back test transaction's rows)."""
    assert not connection.in_atomic_block, "any_jobs[sqlite] needs committed rows: transactional_db, not db"
    clock = FrozenClock()
    with installed(clock, SqliteDriver(clock=clock)) as env:  # type: ignore[type-var]
        yield env  # type: ignore[misc]


def shared_tests(module: object, *, using: tuple[str, ...] = (), leave_out: tuple[str, ...] = ()) -> dict[str, object]:
    """The test functions of ``module`` that run on every driver: those not pinned to one driver
    (``any_jobs`` parametrized indirectly with a single named driver — memory_only, postgres_only) and,
    when ``using`` names fixtures, only those asking for one of them (a module whose other tests are
    about something else, such as its own Postgres processes); ``leave_out`` names tests that are about
    Postgres itself (each module says why)."""
    found: dict[str, object] = {}
    for name, fn in vars(module).items():
        if not name.startswith("test_") or not callable(fn) or name in leave_out:
            continue
        if using and not set(using) & set(inspect.signature(fn).parameters):
            continue
        pinned = any(
            mark.name == "parametrize" and mark.args and mark.args[0] == "any_jobs"
            for mark in getattr(fn, "pytestmark", [])
        )
        if not pinned:
            found[name] = fn
    return found


def adopt_shared_tests(
    namespace: dict[str, object], module: object, *, using: tuple[str, ...] = (), leave_out: tuple[str, ...] = ()
) -> None:
    """Make ``namespace`` (a test module's ``globals()`` after ``from module import *`` for its fixtures and
    helpers) collect exactly :func:`shared_tests` of ``module``: the star import's other tests go."""
    for name in [n for n in namespace if n.startswith("test_")]:
        del namespace[name]
    namespace.update(shared_tests(module, using=using, leave_out=leave_out))
