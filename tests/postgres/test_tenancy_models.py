"""Tenancy through the demo's tenant-scoped ``Order`` on Postgres: outside a run every org is readable;
inside one, every read and write of another org's rows is refused (``X_TENANCY_ACTOR_MISMATCH``), a
``tenant="none"`` job reads only inside ``cross_tenant()``, and ``on_settled`` writes under the job's
tenant. The context functions alone: tests/unit/test_tenancy.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db.models import Sum

from demo_project.shop.models import Order
from tests.conftest import JobsEnv
from tests.unit.test_tenancy import OrgIn, only, org_job
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.execute import Settled
from ultimate_jobs.core.scope import cross_tenant
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import run_jobs

pytestmark = pytest.mark.postgres


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
