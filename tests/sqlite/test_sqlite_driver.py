"""The SQLite driver: the whole conformance suite, the same test bodies as every other driver — twice.

``TestSqliteDriver`` runs each test in pytest-django's rolled-back transaction on the SQLite test file
(the driver's multi-statement operations join it as savepoints, as inside a caller's ``atomic()``).
``TestSqliteDriverCommitted`` runs them on committed rows (``transactional_db``, tables flushed after each
test), so every operation takes its own ``BEGIN IMMEDIATE`` transaction, as in a worker.
"""

from __future__ import annotations

import pytest

from ultimate_jobs.testing.conformance import DriverConformance, DriverFactory

pytestmark = [pytest.mark.django_db]


class TestSqliteDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self, db: None) -> DriverFactory:
        from ultimate_jobs.drivers.sqlite.driver import SqliteDriver

        return lambda clock: SqliteDriver(clock=clock)


class TestSqliteDriverCommitted(DriverConformance):
    @pytest.fixture
    def make_driver(self, transactional_db: None) -> DriverFactory:
        from django.db import connection

        from ultimate_jobs.drivers.sqlite.driver import SqliteDriver

        assert not connection.in_atomic_block, "committed rows: each operation its own BEGIN IMMEDIATE"
        return lambda clock: SqliteDriver(clock=clock)
