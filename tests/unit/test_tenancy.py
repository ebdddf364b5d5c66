"""Tenancy: the ambient actor, the org check, cross_tenant(), and the executor installing the job's
declared tenant — over the context functions directly, then through the demo's tenant-scoped Order."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from django.db.models import Sum

from demo_project.shop.models import Order
from tests.conftest import JobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.context import Actor, acting_as, check_org, cross_tenant, current_actor, current_tenant
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.execute import Settled
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


# -- tenant-scoped models ----------------------------------------------------------------------


def make_orders() -> None:
    for org, number in (("org-1", "A-1"), ("org-1", "A-2"), ("org-2", "B-1")):
        Order.objects.create(org_id=org, number=number, total_cents=100)


@pytest.mark.django_db
def test_outside_a_run_every_org_is_readable() -> None:
    make_orders()
    assert Order.objects.count() == 3
    assert sorted(o.number for o in Order.objects.all()) == ["A-1", "A-2", "B-1"]


@pytest.mark.django_db
def test_a_run_reads_and_writes_its_own_orgs_rows(jobs: JobsEnv) -> None:
    make_orders()

    def body(run: JobRun[OrgIn]) -> dict[str, Any]:
        mine = Order.objects.filter(org_id=run.input.org_id)
        numbers = sorted(o.number for o in mine)
        order = Order.objects.get(org_id=run.input.org_id, number="A-1")
        order.status = Order.Status.PAID
        order.save()
        updated = mine.update(charges=1)
        count = mine.count()
        assert list(mine.values_list("number", flat=True).order_by("number")) == numbers
        assert mine.exists() and mine.aggregate(n=Sum("charges"))["n"] == 2
        created = Order.objects.create(org_id=run.input.org_id, number="A-3", total_cents=5)
        return {"numbers": numbers, "count": count, "updated": updated, "created": created.number}

    org_job(body, name="own_rows").enqueue({"org_id": "org-1"})
    ex = only(run_jobs(clock=jobs.clock))
    assert ex.outcome == "completed", ex.error
    assert ex.result == {"numbers": ["A-1", "A-2"], "count": 2, "updated": 2, "created": "A-3"}
    assert Order.objects.get(number="A-1").status == "paid"
    assert Order.objects.get(number="B-1").charges == 0


READS_OF_ANOTHER_ORG: list[tuple[str, Callable[[], Any]]] = [
    ("iterate all", lambda: list(Order.objects.all())),
    ("get another org's row", lambda: Order.objects.get(number="B-1")),
    ("filter another org", lambda: list(Order.objects.filter(org_id="org-2"))),
    ("first over all", lambda: Order.objects.order_by("-org_id").first()),
    ("count all", lambda: Order.objects.count()),
    ("update all", lambda: Order.objects.all().update(charges=9)),
    ("update another org", lambda: Order.objects.filter(number="B-1").update(charges=9)),
    ("move a row into another org", lambda: Order.objects.filter(org_id="org-1").update(org_id="org-2")),
    ("delete all", lambda: Order.objects.all().delete()),
    ("create in another org", lambda: Order.objects.create(org_id="org-2", number="B-2", total_cents=1)),
    ("values with the org field", lambda: list(Order.objects.values("org_id", "number"))),
    ("values without the org field", lambda: list(Order.objects.values("number"))),
    ("flat values_list", lambda: list(Order.objects.values_list("number", flat=True))),
    ("exists", lambda: Order.objects.filter(org_id="org-2").exists()),
    ("aggregate", lambda: Order.objects.aggregate(total=Sum("total_cents"))),
    ("iterator", lambda: list(Order.objects.iterator())),
    ("count of a slice", lambda: Order.objects.all()[:2].count()),
    (
        "bulk_create into another org",
        lambda: Order.objects.bulk_create([Order(org_id="org-2", number="B-3", total_cents=1)]),
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("why", "read"), READS_OF_ANOTHER_ORG, ids=[w for w, _ in READS_OF_ANOTHER_ORG])
def test_a_run_touching_another_orgs_rows_is_refused(jobs: JobsEnv, why: str, read: Callable[[], Any]) -> None:
    make_orders()
    codes: list[str] = []

    def body(run: JobRun[OrgIn]) -> None:
        try:
            read()
        except UltimateError as exc:
            codes.append(exc.code)
            raise

    org_job(body, name="other_rows").enqueue({"org_id": "org-1"})
    ex = only(run_jobs(clock=jobs.clock))
    assert codes == ["X_TENANCY_ACTOR_MISMATCH"]
    assert (ex.outcome, ex.code, ex.attempt) == ("dead-lettered", "X_TENANCY_ACTOR_MISMATCH", 1)
    # nothing was written across the boundary
    assert Order.objects.get(number="B-1").charges == 0
    assert Order.objects.count() == 3


@pytest.mark.django_db
def test_saving_or_deleting_an_instance_of_another_org_is_refused(jobs: JobsEnv) -> None:
    make_orders()
    foreign = Order.objects.get(number="B-1")
    codes: list[str] = []

    def body(run: JobRun[OrgIn]) -> None:
        for write in (foreign.save, foreign.delete):
            try:
                write()
            except UltimateError as exc:
                codes.append(exc.code)

    org_job(body, name="foreign_instance").enqueue({"org_id": "org-1"})
    assert only(run_jobs(clock=jobs.clock)).outcome == "completed"
    assert codes == ["X_TENANCY_ACTOR_MISMATCH", "X_TENANCY_ACTOR_MISMATCH"]
    assert Order.objects.filter(number="B-1").exists()


@pytest.mark.django_db
def test_a_tenant_none_job_reads_only_inside_cross_tenant(jobs: JobsEnv) -> None:
    make_orders()
    codes: list[str] = []

    def body(run: JobRun[Any]) -> dict[str, int]:
        try:
            list(Order.objects.filter(org_id="org-1"))
        except UltimateError as exc:
            codes.append(exc.code)
        by_org: dict[str, int] = {}
        for order in cross_tenant("sales report across every org", lambda: list(Order.objects.all())):
            by_org[order.org_id] = by_org.get(order.org_id, 0) + 1
        return by_org

    job(idempotency_key=lambda i: "report", tenant="none", retry={"attempts": 1})(body).enqueue({})
    ex = only(run_jobs(clock=jobs.clock))
    assert codes == ["X_TENANCY_ACTOR_ORG_REQUIRED"]
    assert (ex.outcome, ex.result) == ("completed", {"org-1": 2, "org-2": 1})


@pytest.mark.django_db
def test_on_settled_writes_under_the_jobs_tenant(jobs: JobsEnv) -> None:
    make_orders()

    def mark(settled: Settled) -> None:
        order = Order.objects.get(org_id=settled.input.org_id, number=settled.input.number)
        order.status = Order.Status.FULFILLED if settled.outcome == "completed" else Order.Status.ATTENTION
        order.save()

    def boom(run: JobRun[OrgIn]) -> None:
        raise UltimateError("X_GATEWAY_DOWN", "down")

    org_job(lambda run: None, name="marks_done", on_settled=mark).enqueue({"org_id": "org-1", "number": "A-1"})
    org_job(boom, name="marks_broken", on_settled=mark).enqueue({"org_id": "org-2", "number": "B-1"})
    report = run_jobs(clock=jobs.clock)
    assert sorted(e.outcome or "" for e in report.executions) == ["completed", "dead-lettered"]
    assert all(e.on_settled_error is None for e in report.executions)
    assert Order.objects.get(number="A-1").status == "fulfilled"
    assert Order.objects.get(number="B-1").status == "attention"
