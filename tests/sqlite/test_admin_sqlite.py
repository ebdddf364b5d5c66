"""The admin's pages and actions (tests/postgres/test_admin.py) on the SQLite driver: the same bodies, with
the shop scenario's driver the SQLite one on committed rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import installed
from tests.postgres import test_admin as shared
from tests.postgres.test_admin import *  # noqa: F403  (the module's fixtures and helpers)
from tests.sqlite.conftest import adopt_shared_tests
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pg() -> Iterator[Any]:
    """The admin's environment — named as the shared tests ask for it — on the SQLite driver."""
    clock = FrozenClock()
    with installed(clock, SqliteDriver(clock=clock)) as env:  # type: ignore[type-var]
        yield env


adopt_shared_tests(globals(), shared)
