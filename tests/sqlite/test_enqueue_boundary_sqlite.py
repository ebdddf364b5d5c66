"""The enqueue boundary on the SQLite driver: tests/postgres/test_enqueue_boundary.py's refusals (every
request no database can store is ``X_JOB_REQUEST_INVALID`` at the call, nothing written) and
tests/postgres/test_enqueue_fuzz.py's property (an enqueue writes its row, read back equal, or raises a
coded error) — the same bodies over a ``driver`` fixture that builds the SQLite driver."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import installed
from tests.postgres.test_enqueue_boundary import (
    test_a_hand_built_batch_is_checked_by_the_router_before_any_row,
    test_a_request_no_database_can_store_is_refused_at_the_call,
)
from tests.postgres.test_enqueue_fuzz import test_an_enqueue_writes_its_row_or_raises_a_coded_error
from ultimate_jobs import JobRun, job
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.django_db(transaction=True)]

__all__ = [
    "test_a_hand_built_batch_is_checked_by_the_router_before_any_row",
    "test_a_request_no_database_can_store_is_refused_at_the_call",
    "test_an_enqueue_writes_its_row_or_raises_a_coded_error",
]


@pytest.fixture
def driver() -> Iterator[SqliteDriver]:
    clock = FrozenClock()
    chosen = SqliteDriver(clock=clock)
    with installed(clock, chosen):  # type: ignore[type-var]

        @job(name="fuzzed", idempotency_key=lambda i: str(sorted(i)) if isinstance(i, dict) else "k", tenant="none")
        def fuzzed(run: JobRun[Any]) -> None:
            return None

        yield chosen
