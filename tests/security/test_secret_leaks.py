"""The secrets of a job's input, searched for everywhere they could leak, once this process no longer
declares the job (a web process that never imports the job module, or a job renamed while its dead
letters remain).

Two jobs hold secrets: the shop's ``charge_order`` (a top-level card token) and a payout whose input
holds one at every depth — a top-level field, a nested model, a list item, a dict value — enqueued
through the outbox. Both fail with an error quoting their secrets; the payout also returns a secret
object from one step, quotes a secret in another step's output and in a progress note, and replays both
steps on its second attempt. Then both are unregistered, and every rendering of every secret (as is,
repr/JSON escaped, URL-encoded, a fragment) is searched for in: every CLI command's output (human and
JSON), every admin page, every JSON view, the log records of the whole scenario, and every column of
every row of ``x_jobs``, ``x_job_steps`` and ``x_outbox``. Zero hits: the rows hold the secrets sealed
(:mod:`ultimate_jobs.guards.sealing`), the surfaces show them masked, the worker scrubbed the free text.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from tests.admin_scenario import CARD_TOKEN, Scenario, build_scenario, postgres_env
from tests.conftest import Env
from tests.security.payout import ALL_RENDERINGS, SECRETS, declare_payout, payout_input, renderings
from ultimate_jobs.core import registry
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.outbox import OutboxRouter, outbox_relay, postgres_outbox_store
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RENDERINGS = ALL_RENDERINGS | renderings(CARD_TOKEN)
TABLES = ("x_jobs", "x_job_steps", "x_outbox")
ADMIN_PAGES = (
    "admin:ultimate_jobs_job_changelist",
    "admin:ultimate_jobs_deadletter_changelist",
    "admin:ultimate_jobs_queue_changelist",
    "admin:ultimate_jobs_worker_changelist",
    "admin:ultimate_jobs_scheduledtask_changelist",
)


@dataclass
class Shop:
    scenario: Scenario
    payout_id: str
    log: list[logging.LogRecord]


@pytest.fixture
def shop(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Iterator[Shop]:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")  # every record of the whole scenario
    with postgres_env(monkeypatch) as env:
        scenario = build_scenario(env)
        payout_id = fail_a_payout_through_the_outbox(env)
        registry.unregister("charge_order")  # this process no longer declares the jobs
        registry.unregister("payout")
        yield Shop(scenario, payout_id, caplog.records)


def fail_a_payout_through_the_outbox(env: Env[PostgresDriver]) -> str:
    store = postgres_outbox_store(clock=env.clock)
    set_jobs_router(OutboxRouter(store=store, driver=env.driver))
    try:
        with transaction.atomic():
            queued = declare_payout([], fail=True).enqueue(payout_input())
    finally:
        set_jobs_router(None)
    assert outbox_relay(store=store, driver=env.driver, clock=env.clock).run_once() == 1
    report = run_jobs(env.driver, clock=env.clock, queues=["payouts"])
    assert report.outcomes["retried"] == 1 and report.outcomes["dead-lettered"] == 1
    return str(queued.id)


def cli(*args: str) -> str:
    """What ``manage.py jobs …`` prints (it must succeed: a surface that errors shows nothing to search)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("jobs", *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def every_cli_output(dead: list[str]) -> dict[str, str]:
    outputs: dict[str, str] = {}
    for args in (("list",), ("list", "--state", "dead"), ("queues",), ("workers",), ("tasks",), ("stats",)):
        for form in ((), ("--json",)):
            outputs[" ".join(("jobs", *args, *form))] = cli(*args, *form)
    outputs["jobs manifest --json"] = cli("manifest", "--json")
    for job_id in dead:
        outputs[f"jobs show {job_id}"] = cli("show", job_id)
        outputs[f"jobs show {job_id} --json"] = cli("show", job_id, "--json")
    return outputs


def every_admin_page(client: Client, dead: list[str]) -> dict[str, str]:
    urls = [reverse(name) for name in ADMIN_PAGES]
    for job_id in dead:
        urls += [reverse(f"admin:ultimate_jobs_{page}_change", args=[job_id]) for page in ("job", "deadletter")]
    pages = {}
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        pages[f"admin {url}"] = response.content.decode()
    form = client.post(reverse(ADMIN_PAGES[1]), {"action": "retry_from_step", "_selected_action": dead})
    pages["admin retry-from-step form"] = form.content.decode()
    return pages


def every_json_view(client: Client, dead: list[str]) -> dict[str, str]:
    urls = [
        "/jobs/list",
        "/jobs/list?state=dead",
        "/jobs/dead-letters",
        "/jobs/queues",
        "/jobs/workers",
        "/jobs/tasks",
        "/jobs/stats",
        "/jobs/manifest",
        "/jobs/outbox",
        *(f"/jobs/job/{job_id}" for job_id in dead),
    ]
    views = {}
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        views[f"json {url}"] = response.content.decode()
    return views


def every_row() -> dict[str, str]:
    """Every column of every row of each table, as JSON and as Postgres's own record text."""
    rows = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"SELECT row_to_json(t)::text, t::text FROM {table} t")
            found = cursor.fetchall()
            assert found, f"{table} has no row to search"
            rows[table] = "\n".join(f"{as_json}\n{as_record}" for as_json, as_record in found)
    return rows


def every_log_record(records: list[logging.LogRecord]) -> str:
    formatter = logging.Formatter("%(levelname)s %(name)s %(message)s")
    lines = []
    for record in records:
        fields = getattr(record, "jobs", None)
        lines += [formatter.format(record), repr(fields), json.dumps(fields, default=str)]
    return "\n".join(lines)


def test_no_surface_no_log_and_no_column_holds_a_secret_of_an_undeclared_job(shop: Shop) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "pw"))
    dead = [shop.scenario.dead_id, shop.payout_id]
    surfaces = {
        **every_cli_output(dead),
        **every_admin_page(client, dead),
        **every_json_view(client, dead),
        "jobs retry (the last: it moves the row)": cli("retry", shop.payout_id, "--json"),
    }
    surfaces.update(every_row())
    surfaces["log"] = every_log_record(shop.log)

    assert all(text for text in surfaces.values()), [name for name, text in surfaces.items() if not text]
    shown = surfaces[f"jobs show {shop.payout_id} --json"]
    assert '"holder": "Ada Lovelace"' in shown and '"api_key": "**********"' in shown  # only secrets are masked
    assert "jobs.attempt.failed" in surfaces["log"] and "declined" in surfaces["log"]  # the error was logged
    leaks = [(name, form) for name, text in surfaces.items() for form in RENDERINGS if form in text]
    assert leaks == []


def test_the_search_finds_a_secret_that_is_there() -> None:
    """The search is no vacuous pass: each secret's renderings include the forms a leak would take."""
    for secret in (*SECRETS.values(), CARD_TOKEN):
        quoted = json.dumps({"error": f"declined {secret!r}"})
        assert any(form in quoted for form in renderings(secret))
