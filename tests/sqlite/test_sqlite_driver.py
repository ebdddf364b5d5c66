"""The SQLite driver: the whole conformance suite, the same test bodies as every other driver.

Each test runs in pytest-django's rolled-back transaction on the SQLite test file, so every scenario
starts on empty tables (the driver's writes join that transaction as savepoints).
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
