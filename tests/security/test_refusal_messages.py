"""No tenancy refusal names the other org: it says the input's org differs, never which.

Every refusal a caller of org A can provoke with data naming org B — ``enqueue_as`` with another org's
input, a stored payload whose org is not its row's, a webhook delivery whose org is not the run's, an
enqueue, a read, and a collision with org B's job — is held to that here, as the test database's superuser
and as the application's role. (The ORM guard's refusals are held to it by ``attacks.refused``.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.conftest import JobsEnv
from tests.security.attacks import A, B
from tests.security.cross_org import ROLES, database_role, declare_charge
from ultimate_jobs import memory_webhook_ledger, operator, webhook
from ultimate_jobs.core.scope import Actor, acting_as
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

role = pytest.fixture(params=ROLES)(database_role)


def names_no_other_org(error: UltimateError | str | None) -> None:
    text = error if isinstance(error, str) else f"{error!s} {error.meta!r}" if error is not None else ""
    assert B not in text, f"the refusal names the other org: {text}"


def test_enqueue_as_with_another_orgs_input_says_the_org_differs_not_which(jobs: JobsEnv, role: str) -> None:
    charge = declare_charge()
    with pytest.raises(UltimateError) as caught:
        charge.enqueue_as(Actor(id="user-1", org_id=A), {"org_id": B})
    assert caught.value.code == "X_JOB_TENANT_MISMATCH"
    assert "the input's org differs" in caught.value.message
    names_no_other_org(caught.value)


def test_a_stored_payload_of_another_org_dead_letters_without_naming_it(jobs: JobsEnv, role: str) -> None:
    charge = declare_charge()
    request = charge.build_request({"org_id": A})
    forged = jobs.driver.enqueue(dataclasses.replace(request, input={"org_id": B}))  # the row is org A's
    last = run_jobs(jobs.driver, clock=jobs.clock).last(forged.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_JOB_TENANT_MISMATCH")
    stored = jobs.driver.operator.get(forged.id)
    assert stored is not None and stored.last_error is not None
    assert "the payload's org differs" in stored.last_error
    names_no_other_org(stored.last_error)


def test_a_webhook_delivery_of_another_org_dead_letters_without_naming_it(jobs: JobsEnv, role: str) -> None:
    def never(i: Any) -> Any:
        raise AssertionError("the seams are never read for a delivery of another org")

    deliver = webhook(name="partner.hooks", tenant="none", endpoint=never, event=never, ledger=memory_webhook_ledger())
    enqueued = deliver.enqueue({"endpoint_id": "ep-1", "event_id": "evt-1", "org_id": B})
    last = run_jobs(jobs.driver, clock=jobs.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_JOB_TENANT_MISMATCH")
    stored = jobs.driver.operator.get(enqueued.id)
    assert stored is not None and "the delivery's org_id differs" in (stored.last_error or "")
    names_no_other_org(stored.last_error)


def test_the_cross_org_refusals_name_only_the_acting_org(jobs: JobsEnv, role: str) -> None:
    charge = declare_charge()
    theirs = charge.enqueue({"org_id": B})
    refusals: list[UltimateError] = []
    with acting_as(Actor(org_id=A)):
        for attempt in (
            lambda: charge.enqueue({"org_id": B}),
            lambda: operator.inspect_job(theirs.id),
            lambda: operator.list_jobs(tenant_id=B),
            lambda: charge.enqueue_as(Actor(org_id=A), {"org_id": A}, id=theirs.id),
        ):
            with pytest.raises(UltimateError) as caught:
                attempt()
            refusals.append(caught.value)
    assert [r.code for r in refusals] == ["X_TENANCY_ACTOR_MISMATCH"] * 3 + ["X_JOB_DUPLICATE"]
    for refusal in refusals:
        names_no_other_org(refusal)
        assert theirs.run_id not in f"{refusal} {refusal.meta!r}"
