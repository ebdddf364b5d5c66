"""An ``async def`` body of org A reads its own org's rows through Django's async ORM and ``sync_to_async``,
and cannot read org B's — the run's org follows into the thread those calls run on.

Each case runs under ``run_jobs`` (the ORM on the calling thread) and on a started lane, as the worker runs
it (the ORM on the lane's ORM thread, with a connection of its own), as the test database's superuser (the
Python guard alone holds) and as the application's role under forced row-level security (on every
connection, so the lane's threads too).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from tests.secapp.models import Item
from tests.security.attacks import A, B, two_orgs
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.execute import AttemptEnv
from ultimate_jobs.core.execute_async import execute_job_async
from ultimate_jobs.core.scope import current_tenant
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.runtime.async_lane import AsyncLane
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

_runs = itertools.count(1)


@pytest.fixture(params=["superuser", "app role"])
def role(request: pytest.FixtureRequest) -> str:
    if request.param == "app role":
        request.getfixturevalue("app_role_on_every_connection")
    return str(request.param)


def raw_secrets() -> list[str]:
    """Every item secret a raw statement sees — past the Python guard: only row-level security limits it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM secapp_item ORDER BY secret")
        return [row[0] for row in cursor.fetchall()]


async def attack(run: JobRun[Any]) -> dict[str, Any]:
    """What a run of org A reaches: its own item, org B's item, and a raw read, each way the async ORM goes."""
    answers: dict[str, Any] = {}
    own = await Item.objects.aget(pk=run.input["own"])
    answers["own"] = own.secret
    try:
        theirs = await Item.objects.aget(pk=run.input["theirs"])
        answers["theirs"] = theirs.secret
    except Item.DoesNotExist:
        answers["theirs"] = "hidden"
    except UltimateError as error:
        answers["theirs"] = error.code
    answers["tenant in sync_to_async"] = await sync_to_async(current_tenant)()
    answers["raw"] = await sync_to_async(raw_secrets)()
    return answers


def in_an_async_run_of_org_a(path: str) -> dict[str, Any]:
    rows = two_orgs()
    clock = FrozenClock()
    driver = MemoryDriver(clock=clock)
    handle = job(name=f"async-attack-{next(_runs)}", idempotency_key=lambda i: "attack", tenant=lambda i: i["org_id"])(
        attack
    )
    payload = {"org_id": A, "own": rows[A]["item"].pk, "theirs": rows[B]["item"].pk}
    try:
        if path == "run_jobs":
            driver.enqueue(handle.build_request(payload))
            report = run_jobs(driver, clock=clock, queues=["default"])
            [execution] = report.executions
        else:
            driver.enqueue(handle.build_request(payload))
            [claimed] = driver.claim(queues=["default"], limit=1, worker_id="w1").jobs
            lane = AsyncLane(name="async-attack")
            lane.start()
            try:
                env = AttemptEnv(driver=driver, clock=clock)
                execution = lane.submit(lambda: execute_job_async(claimed, env, lane=lane, handle=handle)).result(30)
            finally:
                lane.stop(wait=True)
    finally:
        from ultimate_jobs.core import registry

        registry.unregister(handle.name)
    assert execution.outcome == "completed", execution.error
    return execution.result  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", ["run_jobs", "a started lane"])
def test_an_async_body_reads_its_own_orgs_rows_and_never_another_orgs(role: str, path: str) -> None:
    answers = in_an_async_run_of_org_a(path)
    assert answers["own"] == f"secret of {A}"
    assert answers["tenant in sync_to_async"] == A
    if role == "superuser":  # Postgres exempts the superuser: the Python guard refuses the row as it loads
        assert answers["theirs"] == "X_TENANCY_ACTOR_MISMATCH"
        assert answers["raw"] == [f"secret of {A}", f"secret of {B}"]  # raw SQL passes the Python guard
    else:  # row-level security: the database shows org A's rows only, on whichever connection asks
        assert answers["theirs"] == "hidden"
        assert answers["raw"] == [f"secret of {A}"]
