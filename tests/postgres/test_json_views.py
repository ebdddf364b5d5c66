"""The read-only JSON views under ``ultimate_jobs.urls`` (issues 7 and 13): one per read of ``manage.py
jobs``, staff only, the matching admin page's view permission, the same ``as_dict()`` shapes as
``--json``, refusals as ``{"error": {...}}`` with 400/404/501."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client

from tests.admin_scenario import CARD_TOKEN, Scenario, build_scenario, postgres_env
from tests.conftest import Env
from tests.helpers import BareDriver
from ultimate_jobs import operator
from ultimate_jobs.core.installed import set_job_driver
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


# -- every read of the CLI -------------------------------------------------------------------------

VIEWS = {  # URL -> the permission it needs
    "/jobs/list": "view_job",
    "/jobs/workers": "view_worker",
    "/jobs/tasks": "view_scheduledtask",
    "/jobs/stats": "view_job",
    "/jobs/dashboard": "view_dashboard",
    "/jobs/manifest": "view_job",
    "/jobs/outbox": "view_outboxrow",
}


def cli_json(*argv: str) -> Any:
    """What ``manage.py jobs *argv --json`` prints, parsed."""
    out = io.StringIO()
    call_command("jobs", *argv, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_each_view_answers_what_the_cli_prints_with_json(pg: Env[PostgresDriver], shop: Scenario) -> None:
    client = client_for(*VIEWS.values())
    for url, params, argv in [
        ("/jobs/list", {}, ("list",)),
        (
            "/jobs/list",
            {"state": "ready", "queue": "inventory", "limit": "2"},
            ("list", "--state", "ready", "--queue", "inventory", "--limit", "2"),
        ),
        (
            "/jobs/list",
            {"name": "charge_order", "tenant_id": "acme"},
            ("list", "--name", "charge_order", "--tenant", "acme"),
        ),
        ("/jobs/list", {"id_prefix": shop.dead_id[:8]}, ("list", "--id-prefix", shop.dead_id[:8])),
        ("/jobs/list", {"created_from": "2026-01-01T00:05:00Z"}, ("list", "--created-from", "2026-01-01T00:05:00Z")),
        ("/jobs/list", {"created_to": "1767225600001"}, ("list", "--created-to", "1767225600001")),
        ("/jobs/stats", {"since": "1h"}, ("stats", "--since", "1h")),
        ("/jobs/stats", {}, ("stats",)),
        ("/jobs/dashboard", {}, ("stats", "--window", "1h")),
        (
            "/jobs/dashboard",
            {"window": "7d", "job": "charge_order"},
            ("stats", "--window", "7d", "--job", "charge_order"),
        ),
        ("/jobs/manifest", {}, ("manifest",)),
        ("/jobs/outbox", {"limit": "5"}, ("outbox", "--limit", "5")),
    ]:
        response = client.get(url, params)
        assert response.status_code == 200, (url, params, response.content[:300])
        assert response.json() == cli_json(*argv), (url, params)
    for url, key in (("/jobs/workers", "workers"), ("/jobs/tasks", "tasks")):
        body = client.get(url).json()
        assert body == {"now_ms": pg.clock.now_ms(), key: cli_json(key)[key]}, url
    keyed = client.get("/jobs/list", {"idempotency_key": "order:1042"}).json()
    assert [r["id"] for r in keyed["rows"]] == [shop.dead_id] and keyed["rows"][0]["input"][
        "card_token"
    ] == "**********"
    assert "web-1:4711:3f9a" in [w["id"] for w in client.get("/jobs/workers").json()["workers"]]
    assert "nightly_report" in [t["name"] for t in client.get("/jobs/tasks").json()["tasks"]]


def test_the_list_view_pages_by_the_cursors_it_answers(shop: Scenario) -> None:
    client = client_for("view_job")
    first = client.get("/jobs/list", {"limit": "3"}).json()
    older = client.get("/jobs/list", {"limit": "3", "after": first["next"]}).json()
    assert older == cli_json("list", "--limit", "3", "--after", first["next"])
    back = client.get("/jobs/list", {"limit": "3", "before": older["previous"]}).json()
    assert [r["id"] for r in back["rows"]] == [r["id"] for r in first["rows"]]
    assert CARD_TOKEN not in json.dumps([first, older, back])


def test_the_list_view_sorts_and_counts_as_the_cli_does(shop: Scenario) -> None:
    client = client_for("view_job")
    for order in ("name", "-attempts", "-finished", "queue"):
        sorted_page = client.get("/jobs/list", {"order": order, "limit": "3", "count": "1"}).json()
        assert sorted_page == cli_json("list", f"--order={order}", "--limit", "3", "--count"), order
        assert sorted_page["order"] == order and sorted_page["count"]["basis"] == "count"
    following = client.get("/jobs/list", {"order": "name", "limit": "3"}).json()
    assert "count" not in following and following["next"] is not None
    rest = client.get("/jobs/list", {"order": "name", "limit": "3", "after": following["next"]}).json()
    names = [r["name"] for r in following["rows"] + rest["rows"]]
    assert names == sorted(names)
    counted = client.get("/jobs/list", {"state": "dead", "count": "1"}).json()["count"]
    assert counted == {"rows": 1, "basis": "count", "exact": True, "text": "1"}
    mixed = client.get("/jobs/list", {"order": "-name", "after": following["next"]})
    assert mixed.status_code == 400 and mixed.json()["error"]["code"] == "X_JOB_PAGE_INVALID"


def test_each_new_view_needs_staff_and_its_permission(shop: Scenario) -> None:
    for url, codename in VIEWS.items():
        for client in (Client(), client_for(codename, staff=False)):
            response = client.get(url)
            assert response.status_code == 302 and "/admin/login/" in response["Location"], url
        others = [c for c in set(VIEWS.values()) if c != codename]
        refused = client_for(*others).get(url)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden", url
        assert client_for(codename).get(url).status_code == 200, url
        assert client_for(codename.replace("view_", "change_")).get(url).status_code == 200, url  # as the admin
        assert client_for(codename).post(url).status_code == 405, url


@pytest.mark.parametrize(
    ("url", "params", "code"),
    [
        ("/jobs/list", {"state": "zombie"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"state": "dead\x00"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"created_from": "yesterday"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"created_to": "99999-01-01"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"created_to": "9" * 30}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"limit": "lots"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"limit": "201"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"order": "priority"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"order": "-"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"count": "yes"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"limit": "0"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"after": "jc1.garbage"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"name": "charge\x00"}, "X_JOB_PAGE_INVALID"),
        ("/jobs/list", {"idempotency_key": "k" * 501}, "X_JOB_PAGE_INVALID"),
        ("/jobs/stats", {"since": "soon"}, "X_JOB_ARGUMENT_INVALID"),
        ("/jobs/stats", {"since": "3651d"}, "X_JOB_ARGUMENT_INVALID"),
        ("/jobs/stats", {"since": "1h\x00"}, "X_JOB_ARGUMENT_INVALID"),
        ("/jobs/dashboard", {"window": "2h"}, "X_JOB_ARGUMENT_INVALID"),
        ("/jobs/dashboard", {"job": "charge\x00"}, "X_JOB_ARGUMENT_INVALID"),
        ("/jobs/outbox", {"limit": "0"}, "X_JOB_ARGUMENT_INVALID"),
        ("/jobs/outbox", {"limit": "1001"}, "X_JOB_ARGUMENT_INVALID"),
        ("/jobs/outbox", {"limit": "many"}, "X_JOB_ARGUMENT_INVALID"),
    ],
)
def test_bad_input_is_400_with_its_code(shop: Scenario, url: str, params: dict[str, str], code: str) -> None:
    response = client_for(*VIEWS.values()).get(url, params)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == code
    assert set(response.json()["error"]) == {"code", "message", "meta"}
    assert "Traceback" not in response.content.decode() and len(response.content) < 2_000


def test_both_cursors_at_once_are_refused(shop: Scenario) -> None:
    client = client_for("view_job")
    page = client.get("/jobs/list", {"limit": "2"}).json()
    response = client.get("/jobs/list", {"after": page["next"], "before": page["next"]})
    assert response.status_code == 400 and response.json()["error"]["code"] == "X_JOB_PAGE_INVALID"


def test_a_driver_without_an_operator_store_is_501_where_a_read_needs_it(shop: Scenario) -> None:
    set_job_driver(BareDriver())  # type: ignore[arg-type]
    client = client_for("view_queue", "view_deadletter", *VIEWS.values())
    for url in (
        "/jobs/list",
        f"/jobs/job/{shop.dead_id}",
        "/jobs/dead-letters",
        "/jobs/workers",
        "/jobs/tasks",
        "/jobs/stats",
        "/jobs/dashboard",
    ):
        response = client.get(url)
        assert response.status_code == 501, url
        assert (
            response.json()["error"]["code"] == "X_NOT_IMPLEMENTED"
            and response.json()["error"]["meta"]["driver"] == "bare"
        )
    queues = {q["queue"]: q for q in client.get("/jobs/queues").json()["queues"]}
    assert queues["default"]["ready"] == 2  # the driver's stats()
    assert client.get("/jobs/manifest").status_code == 200  # declarations: no driver read
