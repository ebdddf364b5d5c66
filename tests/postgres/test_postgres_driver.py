"""The Postgres driver: the whole conformance suite, the same test bodies as every other driver.

Each test runs in pytest-django's rolled-back transaction, so every scenario starts on empty tables.
"""

from __future__ import annotations

import pytest

from ultimate_jobs.contracts.protocol import JobDriver
from ultimate_jobs.testing.conformance import DriverConformance, DriverFactory, StateWriter

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


class TestPostgresDriver(DriverConformance):
    @pytest.fixture
    def make_driver(self, db: None) -> DriverFactory:
        from ultimate_jobs.drivers.postgres.driver import PostgresDriver

        return lambda clock: PostgresDriver(clock=clock)

    @pytest.fixture
    def write_state(self) -> StateWriter:
        def write(driver: JobDriver, job_id: str, state: str) -> None:
            from django.db import connection

            from ultimate_jobs.models import Job

            with connection.cursor() as cursor:  # DDL is transactional: the test's rollback restores it
                cursor.execute("ALTER TABLE x_jobs DROP CONSTRAINT x_jobs_state_check")
            Job.objects.filter(pk=job_id).update(state=state)

        return write
