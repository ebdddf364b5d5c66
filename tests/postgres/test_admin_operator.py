"""The admin's job lists read through ``ultimate_jobs.operator`` (issue 13): with the shop's queues
(``tests.admin_scenario``) enqueued on a memory driver installed process-wide, and again on Postgres
(``any_jobs``), they show the rows ``manage.py jobs list --json`` lists — the same filters, the same
order, the operator's cursors for paging — act on every matching row through the operator's bulk
actions, and on a driver without an operator store show ``X_NOT_IMPLEMENTED`` instead of a table."""

from __future__ import annotations

import html
import io
import json
import re
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.admin_scenario import Scenario, build_scenario
from tests.conftest import AnyJobsEnv
from tests.helpers import BareDriver
from ultimate_jobs import JobRun, job, operator
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JOBS = "admin:ultimate_jobs_job_changelist"
DEAD = "admin:ultimate_jobs_deadletter_changelist"
ROW = re.compile(
    r'<th class="field-job"><a href="[^"]+"><span class="uj-job-name">([^<]+)</span><br>'
    r'<code class="uj-id">([0-9a-f-]{36})</code></a></th>'
)


@pytest.fixture
def client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.test", "pw"))
    return client


def listed(client: Client, page: str = JOBS, **params: str) -> list[tuple[str, str]]:
    """The (name, id) of each row of an admin list, top to bottom."""
    response = client.get(reverse(page), params)
    assert response.status_code == 200, response.content[:300]
    return ROW.findall(response.content.decode())


def cli_list(*argv: str) -> list[tuple[str, str]]:
    """The (name, id) of each row ``manage.py jobs list --json`` prints."""
    out = io.StringIO()
    call_command("jobs", "list", "--json", *argv, stdout=out)
    return [(row["name"], row["id"]) for row in json.loads(out.getvalue())["rows"]]


def messages_of(page: str) -> list[str]:
    found = re.findall(r'<li class="(?:success|error|warning)">(.*?)</li>', page, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", m)).strip() for m in found]


def test_the_lists_show_the_rows_the_cli_lists_with_the_same_filters(any_jobs: AnyJobsEnv, client: Client) -> None:
    shop = build_scenario(any_jobs)
    everything = listed(client)
    assert everything == cli_list() and len(everything) == 7
    assert ("charge_order", shop.dead_id) in everything[-3:]  # among the oldest (enqueued in the same ms)
    assert listed(client, DEAD) == cli_list("--state", "dead") == [("charge_order", shop.dead_id)]
    for params, argv in [
        ({"state__exact": "done"}, ("--state", "done")),
        ({"queue": "inventory"}, ("--queue", "inventory")),
        ({"queue": "inventory", "state__exact": "ready"}, ("--queue", "inventory", "--state", "ready")),
        ({"name": "charge_order", "tenant_id": "acme"}, ("--name", "charge_order", "--tenant", "acme")),
        ({"q": shop.dead_id[:8]}, ("--id-prefix", shop.dead_id[:8])),
        ({"q": shop.dead_id.replace("-", "")[:14].upper()}, ("--id-prefix", shop.dead_id[:16])),  # dashes optional
    ]:
        assert listed(client, **params) == cli_list(*argv), params
    assert listed(client, idempotency_key="order:1042") == [("charge_order", shop.dead_id)]
    assert listed(client, q="order:1042") == [("charge_order", shop.dead_id)]  # not an id: an exact key
    assert listed(client, q="order:1042", idempotency_key="receipt:1041") == []  # no job has two keys
    assert listed(client, DEAD, tenant_id="acme") == [("charge_order", shop.dead_id)]
    assert listed(client, DEAD, queue="emails") == []
    page = client.get(reverse(JOBS), {"queue": "nope"}).content.decode()
    assert "No job matches these filters." in page and 'href="?queue=nope"' in page  # an undeclared queue stays shown


def test_the_creation_filters_are_the_cli_instants_and_the_old_drill_down(any_jobs: AnyJobsEnv, client: Client) -> None:
    build_scenario(any_jobs)
    middle = operator.list_jobs().rows[3].created_at_ms
    assert listed(client, created_from=str(middle)) == cli_list("--created-from", str(middle))
    assert listed(client, created_to=str(middle)) == cli_list("--created-to", str(middle))
    assert len(listed(client, created_to="2026-01-02")) == 7 and listed(client, created_from="2026-01-02") == []
    assert len(listed(client, created_at__year="2026", created_at__month="1", created_at__day="1")) == 7
    assert listed(client, created_at__year="2025") == []
    for params in (
        {"created_from": "yesterday"},
        {"created_at__year": "2026", "created_at__month": "2", "created_at__day": "30"},
        {"state__exact": "zombie"},
    ):
        response = client.get(reverse(JOBS), params)
        assert response.status_code == 400 and b"X_JOB_PAGE_INVALID" in response.content, params


def test_the_lists_page_by_the_operator_cursors(any_jobs: AnyJobsEnv, client: Client) -> None:
    @job(name="ops.bulk", queue="ops-bulk", tenant="none", idempotency_key=lambda i: f"bulk:{i['n']}")
    def bulk(run: JobRun[dict[str, Any]]) -> None:
        return None

    for n in range(60):
        bulk.enqueue({"n": n})
        any_jobs.clock.advance(1)
    first = client.get(reverse(JOBS)).content.decode()
    rows = ROW.findall(first)
    assert rows == cli_list("--limit", "50") and "Newer" not in first
    older = re.search(r'<a href="(\?after=[^"]+)" class="uj-older">', first)
    assert older is not None
    second = client.get(reverse(JOBS) + html.unescape(older.group(1))).content.decode()
    after = json.loads(_cli("list", "--json", "--limit", "50"))["next"]
    assert ROW.findall(second) == cli_list("--after", after) and len(ROW.findall(second)) == 10
    assert 'class="uj-older"' not in second  # the last page
    newer = re.search(r'<a href="(\?before=[^"]+)" class="uj-newer">', second)
    assert newer is not None
    assert ROW.findall(client.get(reverse(JOBS) + html.unescape(newer.group(1))).content.decode()) == rows
    bad = client.get(reverse(JOBS), {"after": "jc1.garbage"})
    assert bad.status_code == 400 and b"X_JOB_PAGE_INVALID" in bad.content


def _cli(*argv: str) -> str:
    out = io.StringIO()
    call_command("jobs", *argv, stdout=out)
    return out.getvalue()


def test_an_action_on_every_matching_row_is_one_bulk_call_logged_once(any_jobs: AnyJobsEnv, client: Client) -> None:
    shop = build_scenario(any_jobs)
    url = reverse(DEAD) + "?tenant_id=acme"
    assert "Select every matching job" not in client.get(url).content.decode()  # one page holds every match
    data = {"action": "retry", "select_across": "1", "_selected_action": [shop.dead_id], "index": "0"}
    response = client.post(url, data, follow=True)
    assert messages_of(response.content.decode()) == ["Re-queued 1 job matching state=dead, tenant_id=acme"]
    assert operator.inspect_job(shop.dead_id).job.state == "ready"
    (entry,) = LogEntry.objects.all()
    assert entry.object_id is None and entry.action_flag == CHANGE
    assert entry.object_repr == "requeue-many state=dead, tenant_id=acme"

    run_jobs(any_jobs.driver, clock=any_jobs.clock, queues=["payments"])  # the gateway is still down: dead again
    data = {"action": "remove", "select_across": "1", "_selected_action": [shop.dead_id]}
    confirm = client.post(reverse(DEAD), data).content.decode()
    assert "Yes, remove every matching job" in confirm and "state=dead" in confirm
    assert operator.inspect_job(shop.dead_id).job.state == "dead"  # the confirmation moved nothing
    assert client.post(reverse(DEAD), {**data, "post": "yes"}).status_code == 302
    assert operator.inspect_dead_letters().rows == ()
    assert LogEntry.objects.filter(action_flag=DELETION, object_id=None).count() == 1

    for url, action in [
        (reverse(JOBS), "retry"),  # no state filter: a bulk action needs one
        (reverse(JOBS), "remove"),  # refused before a confirmation page asks about it
        (reverse(JOBS) + "?state__exact=ready", "cancel"),  # cancel has no bulk form
        (reverse(JOBS) + "?state__exact=done&q=receipt:1041", "retry"),  # a search a bulk filter cannot say
    ]:
        response = client.post(url, {"action": action, "select_across": "1", "_selected_action": [shop.done_id]})
        assert response.status_code == 400 and b"X_JOB_ARGUMENT_INVALID" in response.content, (url, action)
    assert operator.inspect_job(shop.done_id).job.state == "done"


def test_a_dead_letter_retried_since_the_page_loaded_is_not_retried_again(any_jobs: AnyJobsEnv, client: Client) -> None:
    shop = build_scenario(any_jobs)
    operator.retry_job(shop.dead_id)  # from the CLI, say: waiting again, no longer a dead letter
    response = client.post(reverse(DEAD), {"action": "retry", "_selected_action": [shop.dead_id]}, follow=True)
    (found,) = messages_of(response.content.decode())
    assert found.startswith(f"{shop.dead_id} refused: X_JOB_NOT_FOUND — job {shop.dead_id} is ready, not dead")
    assert not LogEntry.objects.exists()


def test_the_job_page_and_its_history_read_through_the_operator(any_jobs: AnyJobsEnv, client: Client) -> None:
    shop = build_scenario(any_jobs)
    page = client.get(reverse("admin:ultimate_jobs_job_change", args=[shop.dead_id])).content.decode()
    assert "gateway 503 while capturing" in page and "Retry from the start" in page
    client.post(reverse("admin:ultimate_jobs_job_act", args=[shop.dead_id]), {"action": "retry"})
    history = client.get(reverse("admin:ultimate_jobs_job_history", args=[shop.dead_id]))
    assert history.status_code == 200
    assert "Retried through ultimate_jobs.operator; now ready" in history.content.decode()


def test_a_driver_without_an_operator_store_shows_not_implemented_on_the_page(
    any_jobs: AnyJobsEnv, client: Client
) -> None:
    shop: Scenario = build_scenario(any_jobs)
    set_job_driver(BareDriver())  # type: ignore[arg-type]
    for url in (reverse(JOBS), reverse(DEAD), reverse("admin:ultimate_jobs_job_change", args=[shop.dead_id])):
        response = client.get(url)
        assert response.status_code == 200, url
        text = response.content.decode()
        assert 'id="uj-problem"' in text or "uj-error" in text
        assert "X_NOT_IMPLEMENTED" in text and "has no operator store" in html.unescape(text), url
        assert 'id="result_list"' not in text
    queues = client.get(reverse("admin:ultimate_jobs_queue_changelist")).content.decode()
    assert 'data-queue="default"' in queues  # the queues page reads the driver's stats()
