"""The metrics view's tests (tests/postgres/test_metrics.py), on the SQLite driver: the same bodies,
with the driver the SQLite one on committed rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import installed
from tests.postgres import test_metrics as shared
from tests.postgres.test_metrics import *  # noqa: F403  (the module's fixtures and helpers)
from tests.sqlite.conftest import adopt_shared_tests
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pg() -> Iterator[Any]:
    """The environment — named as the shared tests ask for it — on the SQLite driver."""
    clock = FrozenClock()
    with installed(clock, SqliteDriver(clock=clock)) as env:  # type: ignore[type-var]
        yield env


# these two read the Postgres driver's own statements (SQL_STATS, a jsonb_set on x_outbox)
adopt_shared_tests(
    globals(),
    shared,
    leave_out=(
        "test_one_stats_statement_per_scrape_for_every_queue",
        "test_the_outbox_gauges_count_pending_and_set_aside_rows",
    ),
)
