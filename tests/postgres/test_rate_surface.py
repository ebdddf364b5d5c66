"""The operator's view of the rate limits, from one scripted state on Postgres: ``operator.inspect_rates``,
``manage.py jobs rates [--json]``, the ``rates`` JSON view, the admin's Rate limits page and the
``rate_limit_*`` gauges — and the refusal of that fleet-wide read from inside one org's run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.admin_scenario import postgres_env
from tests.conftest import Env
from tests.helpers import command
from ultimate_jobs import JobRun, RateLimit, job, operator
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.features.metrics import metrics_registry
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PAYMENTS_API = RateLimit("payments-api", "2/s")


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    with postgres_env(monkeypatch) as env:
        yield env


@pytest.fixture
def booked(pg: Env[PostgresDriver]) -> Env[PostgresDriver]:
    """Three starts of org A and one of org B taken under payments-api at one instant: org A's key is booked
    a second ahead with two runs waiting on reserved instants; org B's may start again half a second on."""

    @job(idempotency_key=lambda i: f"capture:{i['n']}", tenant=lambda i: i["org"], rate_limit=PAYMENTS_API,
         rate_key=lambda i: i["org"])  # fmt: skip
    def capture(run: JobRun[Any]) -> None:
        return None

    @job(idempotency_key=lambda i: "idle", tenant="none", rate_limit="5/m")
    def slow_report(run: JobRun[Any]) -> None:
        return None

    for n, org in enumerate(["org-a", "org-a", "org-a", "org-b"]):
        capture.enqueue({"n": n, "org": org})
    run_jobs(clock=pg.clock, advance=False)  # one pass at the frozen instant: the first of each key starts
    return pg


OURS = ("job:slow_report", "payments-api")  # the demo shop's installed app declares payment-gateway too


def ours(rows: list[Any]) -> list[Any]:
    return [r for r in rows if r.limit in OURS]


def ours_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["limit"] in OURS]


def test_inspect_rates_shows_each_key_and_each_declared_limit(booked: Env[PostgresDriver]) -> None:
    now = booked.clock.now_ms()
    rows = [(r.limit, r.key, r.rate, r.jobs, r.next_at_ms, r.reserved) for r in ours(operator.inspect_rates())]
    assert rows == [
        ("job:slow_report", None, "5/m", ("slow_report",), None, 0),  # declared, never used
        ("payments-api", "payments-api:org-a", "2/s", ("capture",), now + 1_500, 2),
        ("payments-api", "payments-api:org-b", "2/s", ("capture",), now + 500, 0),
    ]


def test_the_cli_prints_and_emits_the_same_rows(booked: Env[PostgresDriver]) -> None:
    printed = command("jobs", "rates")
    assert printed.code == 0
    assert "payments-api:org-a" in printed.out and "2/s" in printed.out and "(no start yet)" not in printed.out
    emitted = command("jobs", "rates", "--json")
    assert emitted.code == 0
    assert json.loads(emitted.out)["rates"] == [r.as_dict() for r in operator.inspect_rates()]


def test_the_json_view_and_the_admin_page_show_them_to_staff_with_the_permission(booked: Env[PostgresDriver]) -> None:
    staff = User.objects.create_superuser("ops", "ops@example.com", "x")
    client = Client()
    client.force_login(staff)
    body = client.get("/jobs/rates").json()
    assert body["now_ms"] == booked.clock.now_ms()
    assert [r["key"] for r in ours_json(body["rates"])] == [None, "payments-api:org-a", "payments-api:org-b"]
    page = client.get("/admin/ultimate_jobs/rateschedule/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="uj-rates"' in html and "payments-api:org-a" in html and "no start yet" in html
    outsider = User.objects.create_user("someone", is_staff=True)
    client.force_login(outsider)
    assert client.get("/jobs/rates").status_code == 403


def test_the_gauges_sum_each_limit_over_its_keys(booked: Env[PostgresDriver]) -> None:
    samples = {
        (m.name, s.labels.get("limit")): s.value
        for m in metrics_registry().collect()
        if m.name.startswith("rate_limit")
        for s in m.samples
    }
    assert samples[("rate_limit_keys", "payments-api")] == 2
    assert samples[("rate_limit_waiting", "payments-api")] == 2
    assert samples[("rate_limit_booked_seconds", "payments-api")] == 1.5
    assert samples[("rate_limit_keys", "job:slow_report")] == 0


def test_a_run_of_one_org_cannot_read_every_orgs_rate_keys(booked: Env[PostgresDriver]) -> None:
    answers: list[Any] = []

    @job(idempotency_key=lambda i: "peek", tenant=lambda i: i["org"])
    def peek(run: JobRun[Any]) -> None:
        try:
            answers.append(operator.inspect_rates())
        except UltimateError as refused:
            answers.append(refused)

    peek.enqueue({"org": "org-b"})
    run_jobs(clock=booked.clock, queues=["default"], advance=False)
    [refused] = answers
    assert isinstance(refused, UltimateError) and refused.code == "X_TENANCY_ACTOR_MISMATCH"
    assert "org-a" not in refused.message and "inspect_rates spans every org" in refused.message
