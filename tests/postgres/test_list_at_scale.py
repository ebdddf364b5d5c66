"""The job list and its count past 10,000 matching rows on Postgres: the count is the planner's estimate,
labelled as one, a sort by a column other than creation says it sorted the newest 10,000 matching rows,
and a narrower filter brings back an exact count and a whole sort."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from tests.conftest import installed
from ultimate_jobs import operator
from ultimate_jobs.contracts.ordering import COUNT_CAP
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance_support import request, requests

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MANY = COUNT_CAP + 500


@pytest.fixture
def crowded() -> Iterator[PostgresDriver]:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        for start in range(0, MANY, 1_000):
            env.driver.enqueue_many(requests(min(1_000, MANY - start), queue="bulk"))
            clock.advance(1)
        for _ in range(3):
            env.driver.enqueue(request("rare.job", queue="rare"))
            clock.advance(1)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE x_jobs")
        yield env.driver


def test_the_count_past_the_cap_is_the_planners_estimate_labelled(crowded: PostgresDriver) -> None:
    everything = operator.count_jobs(driver=crowded)
    assert everything.basis == "planner" and not everything.exact
    assert everything.rows is not None and abs(everything.rows - (MANY + 3)) < MANY * 0.1
    assert everything.text().startswith("about ") and "planner" in everything.text()
    rare = operator.count_jobs(queue="rare", driver=crowded)
    assert (rare.rows, rare.basis) == (3, "count")


def test_a_sort_past_the_cap_sorts_the_newest_rows_and_says_so(crowded: PostgresDriver) -> None:
    page = operator.list_jobs(order="name", limit=5, driver=crowded)
    assert page.window == COUNT_CAP
    assert [r.name for r in page.rows][:1] == ["conformance.job"] and "rare.job" in {
        r.name for r in operator.list_jobs(order="-name", limit=5, driver=crowded).rows
    }
    narrowed = operator.list_jobs(order="name", queue="rare", driver=crowded)
    assert narrowed.window is None and [r.name for r in narrowed.rows] == ["rare.job"] * 3
    assert operator.list_jobs(driver=crowded, limit=5).window is None  # by creation: every row is in order


def test_the_admin_labels_the_estimate_and_the_window(crowded: PostgresDriver) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.test", "pw"))
    text = client.get(reverse("admin:ultimate_jobs_job_changelist"), {"order": "-attempts"}).content.decode()
    count = re.search(r'<span id="uj-count" title="([^"]+)">matching: ([^<]+)</span>', text)
    assert count is not None and count.group(1).startswith("an estimate")
    assert count.group(2).startswith("about ") and "(estimated from the planner&#x27;s statistics)" in count.group(2)
    assert "sorted among the newest 10,000 matching rows" in text
