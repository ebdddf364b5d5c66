"""Tenancy: the ambient actor, the org check, cross_tenant(), and the executor installing the job's
declared tenant — over the context functions, no database. The demo's tenant-scoped ``Order`` on
Postgres: tests/postgres/test_tenancy_models.py."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from tests.conftest import JobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.scope import Actor, acting_as, check_org, cross_tenant, current_actor, current_tenant
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import run_jobs


def refusal(fn: Callable[[], Any]) -> UltimateError:
    with pytest.raises(UltimateError) as caught:
        fn()
    return caught.value


# -- the context functions ---------------------------------------------------------------------


def test_outside_any_scope_the_guard_is_off() -> None:
    assert current_actor() is None and current_tenant() is None
    check_org("org-1", model="Order")
    check_org(None, model="Order")


def test_acting_as_installs_the_actor_for_the_block_only() -> None:
    actor = Actor(id="user-1", org_id="org-1")
    with acting_as(actor) as installed:
        assert installed is actor
        assert current_actor() is actor and current_tenant() == "org-1"
        with acting_as(Actor(org_id="org-2")):
            assert current_tenant() == "org-2"
        assert current_tenant() == "org-1"
    assert current_actor() is None


def test_acting_as_is_undone_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), acting_as(Actor(org_id="org-1")):
        raise RuntimeError("boom")
    assert current_actor() is None


def test_a_row_of_another_org_is_x_tenancy_actor_mismatch() -> None:
    with acting_as(Actor(org_id="org-1")):
        check_org("org-1", model="Order")
        err = refusal(lambda: check_org("org-2", model="Order"))
        assert err.code == "X_TENANCY_ACTOR_MISMATCH"
        assert err.meta == {"model": "Order", "actor_org": "org-1"}  # the other org is never named
        assert "org-2" not in err.message
        assert refusal(lambda: check_org(None, model="Order")).code == "X_TENANCY_ACTOR_MISMATCH"


def test_a_uuid_org_compares_by_its_text() -> None:
    org = uuid.uuid4()
    with acting_as(Actor(org_id=str(org))):
        check_org(org, model="Order")


def test_a_scope_with_no_org_is_x_tenancy_actor_org_required() -> None:
    with acting_as(Actor(org_id=None)):
        err = refusal(lambda: check_org("org-1", model="Order"))
        assert err.code == "X_TENANCY_ACTOR_ORG_REQUIRED"
        assert err.meta == {"model": "Order"}


def test_cross_tenant_lifts_the_guard_for_its_function_only() -> None:
    def read_two_orgs() -> str:
        check_org("org-1", model="Order")
        check_org("org-2", model="Order")
        return "both"

    with acting_as(Actor(org_id=None)):
        assert cross_tenant("nightly totals across every org", read_two_orgs) == "both"
        assert current_tenant() is None
        assert refusal(lambda: check_org("org-1", model="Order")).code == "X_TENANCY_ACTOR_ORG_REQUIRED"
    with acting_as(Actor(id="u", org_id="org-1")):
        assert cross_tenant("support looks across", lambda: (read_two_orgs(), current_actor()))[1] == Actor(
            id="u", org_id="org-1"
        )
        assert refusal(lambda: check_org("org-2", model="Order")).code == "X_TENANCY_ACTOR_MISMATCH"
    assert cross_tenant("no scope at all", read_two_orgs) == "both"


def test_cross_tenant_is_undone_when_its_function_raises() -> None:
    def raises() -> None:
        raise RuntimeError("boom")

    with acting_as(Actor(org_id="org-1")):
        with pytest.raises(RuntimeError):
            cross_tenant("x", raises)
        assert refusal(lambda: check_org("org-2", model="Order")).code == "X_TENANCY_ACTOR_MISMATCH"


def test_acting_as_inside_cross_tenant_re_arms_the_guard() -> None:
    def nested() -> None:
        with acting_as(Actor(org_id="org-1")):
            check_org("org-2", model="Order")

    assert refusal(lambda: cross_tenant("x", nested)).code == "X_TENANCY_ACTOR_MISMATCH"


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_cross_tenant_needs_a_reason(reason: Any) -> None:
    calls: list[str] = []
    assert refusal(lambda: cross_tenant(reason, lambda: calls.append("ran"))).code == "X_INVARIANT"
    assert calls == []


def test_the_scope_does_not_leak_into_another_thread() -> None:
    seen: list[str | None] = []
    with acting_as(Actor(org_id="org-1")):
        thread = threading.Thread(target=lambda: seen.append(current_tenant()))
        thread.start()
        thread.join()
    assert seen == [None]


# -- the executor installs the declared tenant -------------------------------------------------


class OrgIn(pydantic.BaseModel):
    org_id: str
    number: str = "1"


def org_job(fn: Callable[[JobRun[Any]], Any], **options: Any) -> Any:
    options.setdefault("input", OrgIn)
    options.setdefault("idempotency_key", lambda i: f"k:{i.org_id}:{i.number}")
    options.setdefault("tenant", lambda i: i.org_id)
    options.setdefault("retry", {"attempts": 1})
    return job(**options)(fn)


def only(report: Any) -> Any:
    assert len(report.executions) == 1
    return report.executions[0]


def test_the_body_runs_under_the_declared_tenant(jobs: JobsEnv) -> None:
    seen: list[Any] = []

    def body(run: JobRun[OrgIn]) -> None:
        seen.append((current_tenant(), current_actor(), run.actor.org_id))
        check_org("org-1", model="Order")
        check_org("org-2", model="Order")

    org_job(body, name="tenant_body").enqueue({"org_id": "org-1"})
    ex = only(run_jobs(clock=jobs.clock))
    assert seen == [("org-1", Actor(org_id="org-1"), "org-1")]
    assert (ex.outcome, ex.code) == ("dead-lettered", "X_TENANCY_ACTOR_MISMATCH")  # terminal: attempt 1
    assert ex.stop_reason == "terminal"


def test_a_tenant_none_body_has_no_org(jobs: JobsEnv) -> None:
    def body(run: JobRun[Any]) -> str:
        assert current_tenant() is None and current_actor() == Actor()
        cross_tenant("a report over every org", lambda: check_org("org-9", model="Order"))
        check_org("org-9", model="Order")
        return "unreachable"

    job(idempotency_key=lambda i: "report", tenant="none", retry={"attempts": 1})(body).enqueue({})
    ex = only(run_jobs(clock=jobs.clock))
    assert (ex.outcome, ex.code) == ("dead-lettered", "X_TENANCY_ACTOR_ORG_REQUIRED")
