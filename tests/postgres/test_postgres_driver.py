"""The Postgres driver: the whole conformance suite, the same test bodies as every other driver.

Each test runs in pytest-django's rolled-back transaction, so every scenario starts on empty tables.
"""

from __future__ import annotations

import pytest

from ultimate_jobs.testing.conformance import DriverConformance, DriverFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


class TestPostgresDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self, db: None) -> DriverFactory:
        from ultimate_jobs.drivers.postgres.driver import PostgresDriver

        return lambda clock: PostgresDriver(clock=clock)
