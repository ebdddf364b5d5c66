"""The read-only JSON views under ``ultimate_jobs.urls`` (issue 7): staff only, the page's view
permission, the operator records' ``as_dict()`` shapes, refusals as ``{"error": {...}}``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.admin_scenario import CARD_TOKEN, Scenario, build_scenario, postgres_env
from tests.conftest import Env
from ultimate_jobs import operator
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    with postgres_env(monkeypatch) as env:
        yield env


@pytest.fixture
def shop(pg: Env[PostgresDriver]) -> Scenario:
    return build_scenario(pg)


def client_for(*codenames: str, staff: bool = True) -> Client:
    user = User.objects.create_user(f"u-{uuid.uuid4().hex[:8]}", is_staff=staff)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="ultimate_jobs", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


def test_anonymous_and_non_staff_callers_are_sent_to_the_login(shop: Scenario) -> None:
    for client in (Client(), client_for("view_queue", "view_job", "view_deadletter", staff=False)):
        for url in ("/jobs/queues", f"/jobs/job/{shop.dead_id}", "/jobs/dead-letters"):
            response = client.get(url)
            assert response.status_code == 302 and "/admin/login/" in response["Location"], url


def test_staff_needs_the_page_view_permission(shop: Scenario) -> None:
    client = client_for("view_job")  # may read a job, not the queues or the dead letters
    assert client.get(f"/jobs/job/{shop.dead_id}").status_code == 200
    for url in ("/jobs/queues", "/jobs/dead-letters"):
        response = client.get(url)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"
    assert client_for("change_queue").get("/jobs/queues").status_code == 200  # change implies view, as in the admin


def test_queues_is_inspect_queues_with_the_clock(pg: Env[PostgresDriver], shop: Scenario) -> None:
    body = client_for("view_queue").get("/jobs/queues").json()
    assert body["now_ms"] == pg.clock.now_ms()
    assert body["queues"] == [q.as_dict() for q in operator.inspect_queues()]
    exports = next(q for q in body["queues"] if q["queue"] == "exports")
    assert exports["paused"] is True and exports["ready"] == 1


def test_a_job_is_inspect_job_redacted_an_unknown_id_is_404_and_a_malformed_one_400(shop: Scenario) -> None:
    client = client_for("view_job")
    response = client.get(f"/jobs/job/{shop.dead_id}")
    assert response["Cache-Control"].startswith("max-age=0")
    body = response.json()
    assert body == operator.inspect_job(shop.dead_id).as_dict()
    assert [s["name"] for s in body["steps"]] == ["reserve_stock", "authorize"]
    assert "GatewayDown" in body["error"]["stack"] and CARD_TOKEN not in response.content.decode()
    missing = client.get(f"/jobs/job/{uuid.uuid4()}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "X_JOB_NOT_FOUND"
    malformed = client.get("/jobs/job/not-a-uuid")
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "X_JOB_ID_INVALID"


def test_dead_letters_pages_with_filters_and_refuses_a_bad_limit(shop: Scenario) -> None:
    client = client_for("view_deadletter")
    body = client.get("/jobs/dead-letters").json()
    assert [r["id"] for r in body["rows"]] == [shop.dead_id] and body["next"] is None
    assert client.get("/jobs/dead-letters", {"queue": "emails"}).json()["rows"] == []
    assert [r["id"] for r in client.get("/jobs/dead-letters", {"tenant_id": "acme"}).json()["rows"]] == [shop.dead_id]
    for limit in ("lots", "5000"):
        refused = client.get("/jobs/dead-letters", {"limit": limit})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "X_JOB_PAGE_INVALID", limit


def test_the_views_are_read_only(shop: Scenario) -> None:
    client = client_for("view_queue", "view_job", "view_deadletter", "change_deadletter")
    for url in ("/jobs/queues", f"/jobs/job/{shop.dead_id}", "/jobs/dead-letters"):
        assert client.post(url).status_code == 405, url
    assert operator.inspect_job(shop.dead_id).job.state == "dead"
