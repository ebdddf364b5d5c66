"""The backfill ledger's surfaces on the memory and the Postgres driver: the admin's Backfills page
(the view permission, the status filter, each pass's job linked), the JSON view ``backfills``, and the
ledger row under ``backfill`` on ``jobs show``, the job page and the JSON view ``job/<id>``."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.conftest import AnyJobsEnv
from tests.helpers import command
from tests.secapp.models import Post
from ultimate_jobs import operator
from ultimate_jobs.contracts.schedules import BackfillBegin
from ultimate_jobs.core.declare import job
from ultimate_jobs.core.signals import CancelSignal
from ultimate_jobs.features.backfills import backfill
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("own_backfills")]

PAGE = "/admin/ultimate_jobs/backfill/"


def client_for(*codenames: str) -> Client:
    user = User.objects.create_user(f"u-{uuid.uuid4().hex[:8]}", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="ultimate_jobs", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


def boom(rows: list[Post], signal: CancelSignal) -> None:
    raise RuntimeError("no")


def two_passes(env: AnyJobsEnv) -> tuple[str, str]:
    """A completed pass of ``slugs`` and a failed one of ``broken``; answers their job ids."""
    Post.objects.bulk_create(Post(title=f"p{i}") for i in range(3))
    slugs = backfill(name="slugs", tenant="none", rate=1_000, source=lambda ctx: Post.objects.all(),
                     handle=lambda rows, signal: None)  # fmt: skip
    broken = backfill(name="broken", tenant="none", rate=1_000, retry={"attempts": 1},
                      source=lambda ctx: Post.objects.all(), handle=boom)  # fmt: skip
    done, failed = slugs.enqueue(), broken.enqueue()
    run_jobs(env.driver, clock=env.clock)
    return done.id, failed.id


def test_the_ledger_page_lists_filters_and_links_each_pass_to_its_job(any_jobs: AnyJobsEnv) -> None:
    done_id, failed_id = two_passes(any_jobs)
    client = client_for("view_backfill")
    page = client.get(PAGE)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="uj-backfills"' in html and ">Backfills<" in html  # the page and its tab
    for job_id in (done_id, failed_id):
        assert f'href="/admin/ultimate_jobs/job/{job_id}/change/"' in html
    assert "slugs" in html and "broken" in html
    completed = client.get(PAGE, {"status": "completed"}).content.decode()
    assert done_id in completed and failed_id not in completed
    failed = client.get(PAGE, {"status": "failed"}).content.decode()
    assert failed_id in failed and done_id not in failed
    assert "RuntimeError" in failed  # the failed pass's error code (an exception without one: its class)
    refused = client.get(PAGE, {"status": "bogus"})
    assert refused.status_code == 400 and refused.content.decode().startswith("X_JOB_ARGUMENT_INVALID")
    assert client.get(f"{PAGE}{uuid.uuid4()}/change/").status_code == 302  # a row id leads back to the list
    assert client.get(f"{PAGE}not-an-id/change/").status_code == 400


def test_the_ledger_page_needs_the_view_permission(any_jobs: AnyJobsEnv) -> None:
    assert client_for("view_job").get(PAGE).status_code == 403
    assert client_for("view_backfill").get(PAGE).status_code == 200
    page = client_for("view_job").get("/admin/ultimate_jobs/job/").content.decode()
    assert ">Backfills<" not in page  # no tab to a page the user may not view


def test_the_json_view_is_inspect_backfills(any_jobs: AnyJobsEnv) -> None:
    done_id, _ = two_passes(any_jobs)
    client = client_for("view_backfill")
    body = client.get("/jobs/backfills").json()
    assert body == {"backfills": [r.as_dict() for r in operator.inspect_backfills()]}
    assert len(body["backfills"]) == 2
    only = client.get("/jobs/backfills", {"status": "completed"}).json()["backfills"]
    assert [(r["name"], r["job_id"]) for r in only] == [("slugs", done_id)]
    assert client.get("/jobs/backfills", {"name": "broken", "limit": "1"}).json()["backfills"][0]["status"] == "failed"
    for params in ({"status": "bogus"}, {"limit": "0"}, {"limit": "lots"}):
        refused = client.get("/jobs/backfills", params)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "X_JOB_ARGUMENT_INVALID", params
    forbidden = client_for("view_job").get("/jobs/backfills")
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"
    assert Client().get("/jobs/backfills").status_code == 302  # anonymous: to the login


def test_jobs_show_the_job_page_and_the_json_view_carry_the_ledger_row(any_jobs: AnyJobsEnv) -> None:
    done_id, failed_id = two_passes(any_jobs)
    plain = job(name="plain", tenant="none", idempotency_key=lambda i: "plain")(lambda run: None)
    other = plain.enqueue()
    (ledger,) = operator.inspect_backfills(name="slugs")

    shown = command("jobs", "show", done_id, "--json")
    assert shown.code == 0
    assert shown.json["backfill"] == ledger.as_dict()
    assert shown.json["backfill"]["status"] == "completed" and shown.json["backfill"]["rows_processed"] == 3
    assert command("jobs", "show", failed_id, "--json").json["backfill"]["error_code"] == "RuntimeError"
    assert command("jobs", "show", other.id, "--json").json["backfill"] is None  # any other job: null
    human = command("jobs", "show", done_id).out
    assert "backfill     completed: 3 rows in 1 pages, cursor" in human
    assert "backfill     -" in command("jobs", "show", other.id).out

    client = client_for("view_job", "view_backfill")
    assert client.get(f"/jobs/job/{done_id}").json()["backfill"] == ledger.as_dict()
    assert client.get(f"/jobs/job/{other.id}").json()["backfill"] is None
    page = client.get(f"/admin/ultimate_jobs/job/{done_id}/change/").content.decode()
    assert 'id="uj-job-backfill"' in page and 'href="/admin/ultimate_jobs/backfill/"' in page
    assert 'id="uj-job-backfill"' not in client.get(f"/admin/ultimate_jobs/job/{other.id}/change/").content.decode()


def test_the_passes_in_flight_are_beside_the_queue_depth(any_jobs: AnyJobsEnv) -> None:
    store = any_jobs.driver.backfills
    assert store is not None
    assert command("jobs", "queues", "--json").json["backfills"] == []
    assert "in flight" not in command("jobs", "queues").out
    job_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
    row = store.begin(
        BackfillBegin(name="slugs", tenant_id=None, checksum="c", app_version=None, job_id=job_id, run_id=run_id,
                      now_ms=any_jobs.clock.now_ms())
    )  # fmt: skip
    store.progress(row.id, rows_processed=2_000, batches=2, last_cursor=2_000, now_ms=any_jobs.clock.now_ms())
    (running,) = operator.passes_in_flight()
    assert (running.run.name, running.run.rows_processed, running.run.last_cursor) == ("slugs", 2_000, 2_000)
    assert command("jobs", "queues", "--json").json["backfills"] == [running.as_dict()]
    human = command("jobs", "queues").out
    assert "backfill passes in flight" in human and job_id in human
    body = client_for("view_queue").get("/jobs/queues").json()
    assert body["backfills"] == [running.as_dict()]
    store.finish(row.id, status="completed", now_ms=any_jobs.clock.now_ms())
    assert operator.passes_in_flight() == []
