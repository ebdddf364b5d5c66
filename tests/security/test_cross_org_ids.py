"""An id or an idempotency key of org B's job answers nothing of it to org A.

Idempotency keys are per tenant (the live-key index is over ``(name, coalesce(tenant_id, ''), key)``), so
org B's key is no collision for org A: a new row, ``deduped=False``. Job ids are one namespace, so an id of
org B's row cannot be org A's: the enqueue is refused with ``X_JOB_DUPLICATE``, which carries no run id, no
org and no state of the row. On the memory and the Postgres driver, as the superuser and as the app role;
the conformance suite holds the SQLite and Redis drivers to the same.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import AnyJobsEnv
from tests.security.attacks import A, B
from tests.security.cross_org import DRIVERS, ROLES, database_role, declare_charge, jobs_on_driver
from ultimate_jobs.contracts.jobs import Enqueued
from ultimate_jobs.contracts.operator import JobFilter
from ultimate_jobs.core.routing import jobs_router
from ultimate_jobs.core.scope import Actor, acting_as
from ultimate_jobs.errors import UltimateError

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

role = pytest.fixture(params=ROLES)(database_role)
env = pytest.fixture(params=DRIVERS)(jobs_on_driver)


def declare_shared_key_charge() -> Any:
    """``charge`` keyed by the order number alone: two orgs' orders of the same number share a key."""
    return declare_charge(key=lambda i: f"charge:{i.n}")


def stored(env: AnyJobsEnv) -> list[tuple[str, str, str | None, str]]:
    """Every row as ``(id, run_id, tenant, state)``."""
    assert env.driver.operator is not None
    return sorted((r.id, r.run_id, r.tenant_id, r.state) for r in env.driver.operator.list(JobFilter()).rows)


def says_nothing_of(error: UltimateError, *values: str) -> None:
    text = f"{error.message} {error.meta!r}"
    for value in values:  # whole words: "already" says nothing of a row's state "ready"
        assert not re.search(rf"\b{re.escape(value)}\b", text), f"the refusal names {value!r}: {text}"


def test_an_id_of_org_bs_job_is_refused_and_the_refusal_says_nothing_of_it(env: AnyJobsEnv) -> None:
    charge = declare_shared_key_charge()
    theirs = charge.enqueue({"org_id": B, "n": 7})
    before = stored(env)
    with pytest.raises(UltimateError) as caught:
        charge.enqueue_as(Actor(id="user-1", org_id=A), {"org_id": A, "n": 8}, id=theirs.id)
    assert caught.value.code == "X_JOB_DUPLICATE"
    says_nothing_of(caught.value, theirs.run_id, B, "ready", "delayed")
    assert stored(env) == before  # nothing inserted, org B's row untouched
    # inside a run of org A (the request is for org A, so the org check passes it to the driver): the same
    with acting_as(Actor(org_id=A)), pytest.raises(UltimateError) as again:
        charge.enqueue_as(Actor(id="user-1", org_id=A), {"org_id": A, "n": 8}, id=theirs.id)
    assert (again.value.code, again.value.message, again.value.meta) == (
        caught.value.code, caught.value.message, caught.value.meta,
    )  # fmt: skip


def test_an_id_of_org_bs_job_in_a_batch_refuses_the_whole_batch(env: AnyJobsEnv) -> None:
    charge = declare_shared_key_charge()
    theirs = charge.enqueue({"org_id": B, "n": 7})
    before = stored(env)
    batch = [
        charge.build_request({"org_id": A, "n": 1}),
        charge.build_request({"org_id": A, "n": 2}, actor=Actor(org_id=A), id=theirs.id),
    ]
    with pytest.raises(UltimateError) as caught:
        jobs_router().enqueue_many(batch)
    assert caught.value.code == "X_JOB_DUPLICATE"
    says_nothing_of(caught.value, theirs.run_id, B)
    assert stored(env) == before


def test_an_id_of_the_callers_own_org_still_answers_its_job(env: AnyJobsEnv) -> None:
    charge = declare_shared_key_charge()
    mine = charge.enqueue({"org_id": A, "n": 7})
    again = charge.enqueue_as(Actor(org_id=A), {"org_id": A, "n": 9}, id=mine.id)
    assert again == Enqueued(mine.id, mine.run_id, True)


def test_org_bs_idempotency_key_is_no_collision_for_org_a(env: AnyJobsEnv) -> None:
    charge = declare_shared_key_charge()
    theirs = charge.enqueue({"org_id": B, "n": 7})
    mine = charge.enqueue_as(Actor(org_id=A), {"org_id": A, "n": 7})  # the same key, charge:7
    assert not mine.deduped and mine.id != theirs.id and mine.run_id != theirs.run_id
    # exactly what an org with no such job gets
    lone = charge.enqueue_as(Actor(org_id="org-C"), {"org_id": "org-C", "n": 7})
    assert not lone.deduped
    assert sorted(r[2] or "" for r in stored(env)) == sorted([A, B, "org-C"])
