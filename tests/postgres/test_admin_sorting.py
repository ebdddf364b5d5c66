"""The job lists' column sorting and count (issue 30, point 5): a click on a header sorts the list by that
column through ``operator.list_jobs(order=...)`` — the rows ``manage.py jobs list --order`` lists — pages
by that order's cursors, and the page says how many rows match (exact up to 10,000, an estimate labelled as
one over that). On the memory driver and Postgres (``any_jobs``); the SQLite driver runs the same cases
(tests/sqlite/test_admin_sorting_sqlite.py). Past 10,000 rows: tests/postgres/test_list_at_scale.py."""

from __future__ import annotations

import html
import io
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.conftest import AnyJobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JOBS = "admin:ultimate_jobs_job_changelist"
DEAD = "admin:ultimate_jobs_deadletter_changelist"
ROW = re.compile(
    r'<th class="field-job"><a href="[^"]+"><span class="uj-job-name">[^<]+</span><br>'
    r'<code class="uj-id">([0-9a-f-]{36})</code>'
)
HEADER = re.compile(r'<th scope="col" class="(sortable [^"]+)"[^>]*>(.*?)</th>', re.S)
LINK = re.compile(r'<a href="([^"]+)" class="uj-sort[^"]*" title="Sort by [^"]+">([^<]+)</a>')


@pytest.fixture
def client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.test", "pw"))
    return client


def page(client: Client, name: str = JOBS, **params: str) -> str:
    response = client.get(reverse(name), params)
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def cli_ids(*argv: str) -> list[str]:
    out = io.StringIO()
    call_command("jobs", "list", "--json", *argv, stdout=out)
    return [row["id"] for row in json.loads(out.getvalue())["rows"]]


def headers(text: str) -> dict[str, tuple[str, str]]:
    """Each sort link of the headers, by its label -> (its header's classes, the link a click follows)."""
    found = {}
    for classes, inner in HEADER.findall(text):
        for url, label in LINK.findall(inner):
            found[label] = (classes, html.unescape(url))
    return found


@pytest.fixture
def shop(any_jobs: AnyJobsEnv) -> dict[str, list[str]]:
    """Jobs whose every sorted column differs: names, queues, attempts (retries), run times, finishes."""

    @job(name="ops.zeta", queue="ops-a", tenant="none", idempotency_key=lambda i: f"z:{i['n']}", retry={"attempts": 1})
    def zeta(run: JobRun[dict[str, Any]]) -> None:
        if run.input.get("fail"):
            raise RuntimeError("card declined")

    @job(name="ops.alpha", queue="ops-b", tenant="none", idempotency_key=lambda i: f"a:{i['n']}")
    def alpha(run: JobRun[dict[str, Any]]) -> None:
        return None

    ids: dict[str, list[str]] = {"dead": [], "done": [], "delayed": []}
    for n in range(3):
        ids["dead"].append(zeta.enqueue({"n": n, "fail": True}).id)
        any_jobs.clock.advance(5)
        run_jobs(any_jobs.driver, clock=any_jobs.clock)
    ids["done"].append(alpha.enqueue({"n": 1}).id)
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    any_jobs.clock.advance(5)
    ids["delayed"].append(alpha.enqueue({"n": 2}, delay=timedelta(minutes=9)).id)
    ids["delayed"].append(zeta.enqueue({"n": 7}, delay=timedelta(minutes=3)).id)
    return ids


@pytest.mark.parametrize(
    "order",
    ["name", "-name", "queue", "-queue", "attempts", "-attempts", "created", "run_at", "-run_at", "-finished"],
)
def test_a_sorted_list_shows_the_rows_the_cli_sorts(
    any_jobs: AnyJobsEnv, client: Client, shop: dict[str, list[str]], order: str
) -> None:
    shown = ROW.findall(page(client, order=order))
    assert shown == cli_ids(f"--order={order}") and len(shown) == (4 if order.endswith("finished") else 6)


def test_the_headers_sort_each_column_and_turn_it_around(
    any_jobs: AnyJobsEnv, client: Client, shop: dict[str, list[str]]
) -> None:
    first = page(client)
    found = headers(first)
    assert set(found) == {"job", "queue", "attempts", "created", "run at", "finished"}  # state is a filter
    assert "sorted descending" in found["created"][0] and 'aria-sort="descending"' in first
    assert found["job"][1] == "?order=name" and found["attempts"][1] == "?order=-attempts"
    assert found["created"][1] == "?order=created"  # the sorted column turns around
    by_name = page(client, order="name")
    assert "sorted ascending" in headers(by_name)["job"][0] and headers(by_name)["job"][1] == "?order=-name"
    assert 'class="sortremove" href="?"' in by_name  # back to newest first
    most = ROW.findall(page(client, order="-attempts"))
    assert most[:4] == shop["done"] + shop["dead"][::-1]  # 1 attempt each: newest first, then the delayed ones
    dead_page = page(client, DEAD)
    dead = headers(dead_page)
    assert set(dead) == {"job", "queue", "attempts", "created", "died"}
    assert 'class="uj-sort uj-sorted" title="Sort by created"' in dead_page  # newest first, by creation
    assert dead["died"][1] == "?order=-finished"


def test_a_sort_keeps_the_filters_and_the_filters_keep_the_sort(
    any_jobs: AnyJobsEnv, client: Client, shop: dict[str, list[str]]
) -> None:
    text = page(client, queue="ops-a", order="-run_at")
    assert ROW.findall(text) == cli_ids("--queue", "ops-a", "--order=-run_at")
    assert headers(text)["job"][1] == "?queue=ops-a&order=name"
    assert 'name="order" value="-run_at"' in text  # the search form and typed filters carry it along
    assert "?order=-run_at&amp;queue=ops-b" in text or "?queue=ops-b&amp;order=-run_at" in text


def test_a_sorted_list_pages_by_its_cursors(any_jobs: AnyJobsEnv, client: Client) -> None:
    @job(name="ops.many", queue="ops-many", tenant="none", idempotency_key=lambda i: f"m:{i['n']}")
    def many(run: JobRun[dict[str, Any]]) -> None:
        return None

    for n in range(60):
        many.enqueue({"n": n}, delay=timedelta(minutes=60 - n))
        any_jobs.clock.advance(1)
    first = page(client, order="run_at")
    assert ROW.findall(first) == cli_ids("--order=run_at", "--limit", "50")
    assert "earliest run time first" in first and "Newer" not in first
    following = re.search(r'<a href="(\?[^"]*after=[^"]+)" class="uj-older">Next', first)
    assert following is not None
    second = client.get(reverse(JOBS) + html.unescape(following.group(1))).content.decode()
    assert len(ROW.findall(second)) == 10 and not set(ROW.findall(second)) & set(ROW.findall(first))
    back = re.search(r'<a href="(\?[^"]*before=[^"]+)" class="uj-newer">&lsaquo; Previous', second)
    assert back is not None
    assert ROW.findall(client.get(reverse(JOBS) + html.unescape(back.group(1))).content.decode()) == ROW.findall(first)


def test_the_page_counts_the_rows_that_match(any_jobs: AnyJobsEnv, client: Client, shop: dict[str, list[str]]) -> None:
    assert '<span id="uj-count" title="an exact count">matching: 6</span>' in page(client)
    assert "matching: 3</span>" in page(client, DEAD)
    assert "matching: 2</span>" in page(client, state__exact="delayed")
    assert "matching: 4</span>" in page(client, order="-finished")  # sorted by finish: finished jobs only
    assert "matching: 0</span>" in page(client, queue="nowhere")
    assert 'id="uj-window"' not in page(client, order="name")  # every matching row was sorted


@pytest.mark.parametrize("order", ["priority", "-", "--created", "name;drop"])
def test_an_order_the_list_does_not_have_is_refused(any_jobs: AnyJobsEnv, client: Client, order: str) -> None:
    response = client.get(reverse(JOBS), {"order": order})
    assert response.status_code == 400 and b"X_JOB_PAGE_INVALID" in response.content


def test_a_cursor_of_another_order_is_refused(any_jobs: AnyJobsEnv, client: Client, shop: dict[str, list[str]]) -> None:
    out = io.StringIO()
    call_command("jobs", "list", "--json", "--order=name", "--limit", "1", stdout=out)
    cursor = json.loads(out.getvalue())["next"]
    response = client.get(reverse(JOBS), {"order": "-attempts", "after": cursor})
    assert response.status_code == 400 and b"X_JOB_PAGE_INVALID" in response.content
