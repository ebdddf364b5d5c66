"""The SQLite driver: the whole conformance suite, the same test bodies as every other driver — twice.

``TestSqliteDriver`` runs each test in pytest-django's rolled-back transaction on the SQLite test file
(the driver's multi-statement operations join it as savepoints, as inside a caller's ``atomic()``).
``TestSqliteDriverCommitted`` runs them on committed rows (``transactional_db``, tables flushed after each
test), so every operation takes its own ``BEGIN IMMEDIATE`` transaction, as in a worker.
"""

from __future__ import annotations

import pytest

from ultimate_jobs.contracts.protocol import JobDriver
from ultimate_jobs.testing.conformance import DriverConformance, DriverFactory, StateWriter

pytestmark = [pytest.mark.django_db]


def store_state(driver: JobDriver, job_id: str, state: str) -> None:
    """Store a state past the table's CHECK constraint, as a newer version's schema would allow."""
    from django.db import connection

    from ultimate_jobs.models import Job

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA ignore_check_constraints = ON")
    try:
        Job.objects.filter(pk=job_id).update(state=state)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA ignore_check_constraints = OFF")


class TestSqliteDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self, db: None) -> DriverFactory:
        from ultimate_jobs.drivers.sqlite.driver import SqliteDriver

        return lambda clock: SqliteDriver(clock=clock)

    @pytest.fixture
    def write_state(self) -> StateWriter:
        return store_state


class TestSqliteDriverCommitted(DriverConformance):
    @pytest.fixture
    def make_driver(self, transactional_db: None) -> DriverFactory:
        from django.db import connection

        from ultimate_jobs.drivers.sqlite.driver import SqliteDriver

        assert not connection.in_atomic_block, "committed rows: each operation its own BEGIN IMMEDIATE"
        return lambda clock: SqliteDriver(clock=clock)

    @pytest.fixture
    def write_state(self) -> StateWriter:
        return store_state
