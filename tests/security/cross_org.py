"""What the cross-org suite shares: the two database roles every test runs under, the drivers, and the job
org A's runs try to start for org B.

The roles: the test database's superuser (Postgres skips row-level security for it, so only the Python
checks hold) and the application's role (no SUPERUSER, no BYPASSRLS, owner of the scoped tables, which
FORCE row-level security).

>>> role = pytest.fixture(params=ROLES)(database_role)         # in a test module
>>> env = pytest.fixture(params=DRIVERS)(jobs_on_driver)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest

from tests.conftest import AnyJobsEnv, installed
from ultimate_jobs import JobRun, job
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.testing import FrozenClock

ROLES = ["superuser", "app role"]
DRIVERS = ["memory", "postgres"]


def database_role(request: pytest.FixtureRequest) -> str:
    """The role this test's connection acts as: the app role switches it with ``SET ROLE`` for the test."""
    if request.param == "app role":
        request.getfixturevalue("as_app_role")
    return str(request.param)


def jobs_on_driver(request: pytest.FixtureRequest, role: str) -> Iterator[AnyJobsEnv]:
    """The memory or the Postgres driver on a frozen clock, installed process-wide, under ``role``."""
    clock = FrozenClock()
    driver: MemoryDriver | PostgresDriver = MemoryDriver(clock=clock)
    if request.param == "postgres":
        driver = PostgresDriver(clock=clock)
    with installed(clock, driver) as env:
        yield env


class OrgIn(pydantic.BaseModel):
    org_id: str
    n: int = 0


def declare_charge(key: Callable[[OrgIn], str] = lambda i: f"charge:{i.org_id}:{i.n}") -> Any:
    """The job ``charge`` of the input's org, keyed by ``key`` (by default org and number)."""

    @job(name="charge", input=OrgIn, idempotency_key=key, tenant=lambda i: i.org_id)
    def charge(run: JobRun[OrgIn]) -> None:
        return None

    return charge
