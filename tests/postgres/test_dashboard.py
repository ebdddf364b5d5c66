"""The operator's dashboard (issue 30): settles per outcome and mean run time bucket by bucket over the last
hour, day or week, of every job or one, the queues now and what needs attention — as ``inspect_dashboard``
answers it on the memory and the Postgres driver (``any_jobs``; tests/sqlite/test_dashboard_sqlite.py runs it
on SQLite, the Redis driver's counter series is in its conformance run), as ``jobs stats --window`` prints
it, as the admin's page draws it and its ``data/`` view serves it, and the refusals of each."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.admin_scenario import postgres_env
from tests.conftest import AnyJobsEnv, Env
from tests.dashboard_scenario import (
    CHARGES,
    MINUTE,
    RECEIPT_MS,
    RECEIPTS,
    REPORTS,
    SYNC_MS,
    SYNCS,
    script_hour,
)
from tests.helpers import command
from ultimate_jobs import operator
from ultimate_jobs.contracts.operator import WorkerInfo
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.models import WebhookEndpointState
from ultimate_jobs.operator import DepthPoint, SeriesPoint, WaitPoint
from ultimate_jobs.operator.dashboard import percentile_ms
from ultimate_jobs.testing.conformance_operator import run_bins

pytestmark = [pytest.mark.django_db(transaction=True)]

PAGE = "admin:ultimate_jobs_dashboard_changelist"
DATA = "admin:ultimate_jobs_dashboard_data"


def busy(points: tuple[SeriesPoint, ...]) -> list[SeriesPoint]:
    return [p for p in points if p.settled]


def test_an_hours_settles_are_bucketed_by_minute_and_outcome(any_jobs: AnyJobsEnv) -> None:
    run = script_hour(any_jobs)
    board = operator.inspect_dashboard("1h")
    assert (board.width_ms, len(board.points)) == (MINUTE, 60)  # every minute, the empty ones as zeros
    assert board.points[-1].at_ms <= board.until_ms < board.points[-1].at_ms + MINUTE  # the last holds now
    receipts = [
        SeriesPoint(run.first_minute_ms + n * MINUTE, done=1, duration_ms=RECEIPT_MS, run_bins=run_bins({1: 1}))
        for n in range(RECEIPTS)
    ]
    assert busy(board.points) == [
        *receipts,
        SeriesPoint(run.spike_at_ms, dead=CHARGES, run_bins=run_bins({0: CHARGES})),  # the spike, in its minute
        SeriesPoint(run.slow_at_ms, done=SYNCS, duration_ms=SYNCS * SYNC_MS, run_bins=run_bins({5: SYNCS})),
        SeriesPoint(run.late_at_ms, done=REPORTS, duration_ms=REPORTS * RECEIPT_MS, run_bins=run_bins({1: REPORTS})),
    ]
    assert board.points[[p.at_ms for p in board.points].index(run.slow_at_ms)].mean_ms == SYNC_MS
    assert (board.total.done, board.total.dead) == (RECEIPTS + SYNCS + REPORTS, CHARGES)
    dead = {a.kind: a.count for a in board.attention}["dead_letters"]
    assert dead == CHARGES
    payments = {q.queue: q for q in board.queues}["payments"]
    assert payments.dead == CHARGES


def test_each_queues_wait_from_run_time_to_start_is_bucketed_with_its_percentiles(any_jobs: AnyJobsEnv) -> None:
    run = script_hour(any_jobs)
    waits = {q.queue: q for q in operator.inspect_dashboard("1h").waits}
    assert set(waits) == {"emails", "payments", "inventory", "reports"}
    started = {queue: [p for p in q.points if p.started] for queue, q in waits.items()}
    assert started["reports"] == [WaitPoint(run.late_at_ms, REPORTS, 300_000, 300_000)]  # two minutes: 1 to 5 min
    assert started["inventory"] == [WaitPoint(run.slow_at_ms, SYNCS, 10, 1_000)]  # the second waited for the first
    assert {p.p95_ms for p in started["emails"]} == {10} and len(started["emails"]) == RECEIPTS
    assert waits["reports"].worst_p95_ms == 300_000 and len(waits["reports"].points) == 60
    assert percentile_ms([0] * 14 + [5], 0.5) == 3_600_000  # an hour or more: the last bin's lower edge
    one = operator.inspect_dashboard("1h", job="dash_build_report")
    assert one.waits == () and one.as_dict()["waits"] == []  # waits are kept per queue, not per job


def test_each_queues_sampled_depth_and_oldest_age_are_in_their_buckets(any_jobs: AnyJobsEnv) -> None:
    run = script_hour(any_jobs)
    board = operator.inspect_dashboard("1h")
    [reports] = [q for q in board.depths if q.queue == "reports"]  # the only queue sampled with jobs waiting
    assert [q.queue for q in board.depths] == ["reports"]
    sampled = [p for p in reports.points if p.depth is not None]
    assert sampled == [
        DepthPoint(run.late_at_ms - MINUTE, REPORTS, MINUTE),  # a minute after the enqueue: 3 waiting, 1 min
        DepthPoint(run.late_at_ms, REPORTS, 2 * MINUTE),
        DepthPoint(run.late_at_ms + MINUTE, 0, None),  # sampled after they ran: nothing waiting
    ]
    assert reports.most == REPORTS and len(reports.points) == 60
    assert operator.inspect_dashboard("1h", job="dash_build_report").depths == ()


def test_one_jobs_series_holds_only_its_own_settles(any_jobs: AnyJobsEnv) -> None:
    run = script_hour(any_jobs)
    board = operator.inspect_dashboard("1h", job="dash_sync_inventory")
    assert board.job == "dash_sync_inventory"
    assert busy(board.points) == [
        SeriesPoint(run.slow_at_ms, done=SYNCS, duration_ms=SYNCS * SYNC_MS, run_bins=run_bins({5: SYNCS}))
    ]
    assert board.as_dict()["points"][-1].keys() == {"at_ms", "done", "retried", "failed", "dead", "mean_ms", "p95_ms"}
    [slow] = busy(board.points)
    assert (slow.mean_ms, slow.p95_ms) == (SYNC_MS, 1_000)  # 900 ms each: the 500 ms - 1 s bin


def test_a_day_and_a_week_sum_the_minutes_into_wider_buckets(any_jobs: AnyJobsEnv) -> None:
    run = script_hour(any_jobs)
    for window, width, count in (("24h", 1_800_000, 48), ("7d", 10_800_000, 56)):
        board = operator.inspect_dashboard(window)
        assert (board.width_ms, len(board.points)) == (width, count), window
        by_bucket: dict[int, list[int]] = {}
        for at, done, dead in [
            *((run.first_minute_ms + n * MINUTE, 1, 0) for n in range(RECEIPTS)),
            (run.spike_at_ms, 0, CHARGES),
            (run.slow_at_ms, SYNCS, 0),
            (run.late_at_ms, REPORTS, 0),
        ]:
            into = by_bucket.setdefault(at - at % width, [0, 0])
            into[0] += done
            into[1] += dead
        assert {p.at_ms: [p.done, p.dead] for p in busy(board.points)} == by_bucket, window


def test_the_attention_strip_counts_paused_queues_silent_workers_and_disabled_endpoints(
    any_jobs: AnyJobsEnv,
) -> None:
    script_hour(any_jobs)
    operator.pause_queue("emails")
    now = any_jobs.clock.now_ms()
    any_jobs.driver.record_worker(WorkerInfo("w-quiet", "host-a", 7, now - 60_000, ("emails",), 4, (), now - 20_000))
    any_jobs.driver.record_worker(WorkerInfo("w-live", "host-b", 8, now - 60_000, ("emails",), 4, (), now - 1_000))
    WebhookEndpointState.objects.create(
        endpoint_id="crm", consecutive_failures=9, disabled_at=timezone.now(), updated_at=timezone.now()
    )
    WebhookEndpointState.objects.create(endpoint_id="erp", consecutive_failures=1, updated_at=timezone.now())
    counts = {a.kind: a.count for a in operator.inspect_dashboard("1h").attention}
    assert counts["paused_queues"] == 1
    assert counts["stale_workers"] == 1  # 20 s since its heartbeat; the other beat a second ago
    assert counts["disabled_endpoints"] == 1
    assert counts["dead_letters"] == CHARGES


def test_a_window_not_offered_or_a_malformed_job_is_refused_with_a_code(any_jobs: AnyJobsEnv) -> None:
    for window in ("2h", "", "1H"):
        with pytest.raises(UltimateError) as refused:
            operator.inspect_dashboard(window)
        assert refused.value.code == "X_JOB_ARGUMENT_INVALID" and "1h, 24h, 7d" in refused.value.message
    for job in (" ", "a\x00b", "x" * 5_000):
        with pytest.raises(UltimateError) as refused:
            operator.inspect_dashboard("1h", job=job)
        assert refused.value.code == "X_JOB_ARGUMENT_INVALID"


# -- the CLI ---------------------------------------------------------------------------------------


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    with postgres_env(monkeypatch) as env:
        yield env


def test_jobs_stats_window_prints_the_series_in_both_forms(pg: Env[PostgresDriver]) -> None:
    run = script_hour(pg)
    data = command("jobs", "stats", "--window", "1h", "--json").json
    assert (data["window"], data["width_ms"], len(data["points"])) == ("1h", MINUTE, 60)
    spike = [p for p in data["points"] if p["at_ms"] == run.spike_at_ms]
    assert spike == [
        {"at_ms": run.spike_at_ms, "done": 0, "retried": 0, "failed": 0, "dead": CHARGES, "mean_ms": 0.0, "p95_ms": 10}
    ]
    assert {"kind": "dead_letters", "count": CHARGES, "label": f"{CHARGES} dead-lettered in the window"} in data[
        "attention"
    ]
    one = command("jobs", "stats", "--window", "24h", "--job", "dash_sync_inventory", "--json").json
    assert (one["job"], one["total"]["done"], one["total"]["mean_ms"]) == ("dash_sync_inventory", SYNCS, SYNC_MS)
    human = command("jobs", "stats", "--window", "1h").out
    assert human.startswith("settles since ") and "(1h, buckets of 1m00s)" in human
    assert re.search(rf"\(window\)\s+{RECEIPTS + SYNCS + REPORTS}\s+0\s+0\s+{CHARGES}\b", human), human
    assert re.search(r"reports\s+\S+\s+3\s+≤ 5 min\s+≤ 5 min", human), human  # the slow queue's waits
    assert re.search(r"reports\s+\S+\s+3\s+2m00s", human), human  # and its sampled depth
    assert "! 4 dead-lettered in the window" in human and "payments" in human


def test_jobs_stats_refuses_a_window_not_offered_and_a_job_without_a_window(pg: Env[PostgresDriver]) -> None:
    for args in (("--window", "2h"), ("--window", "1h", "--since", "1h")):
        result = command("jobs", "stats", *args)
        assert result.code == 2 and result.out == "" and result.err.startswith("Error: "), result
    refused = command("jobs", "stats", "--job", "dash_sync_inventory")
    assert refused.code == 1 and refused.err.startswith("X_JOB_ARGUMENT_INVALID: ") and "--window" in refused.err


# -- the admin page and its data view --------------------------------------------------------------


def staff(*codenames: str) -> Client:
    user = User.objects.create_user(f"ops-{len(codenames)}-{User.objects.count()}", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="ultimate_jobs", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


def table_rows(page: str, caption: str) -> list[list[str]]:
    """The rows of the table behind the chart captioned ``caption``."""
    figure = page[page.index(f"<figcaption>{caption}</figcaption>") :]
    table = figure[figure.index("<tbody>") : figure.index("</tbody>")]
    return [
        [unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
    ]


def test_the_admin_page_draws_each_chart_with_its_table_behind_it(pg: Env[PostgresDriver]) -> None:
    script_hour(pg)
    page = staff("view_dashboard").get(reverse(PAGE)).content.decode()
    assert page.count('<figure class="uj-chart">') == 4 and page.count('<details class="uj-chart-table">') == 4
    settled = table_rows(page, "Jobs settled, by outcome")
    assert ["00:10", "0", "0", "0", str(CHARGES)] in settled  # the spike, ten minutes in (the clock starts 00:00)
    assert settled[0] == ["00:00", "1", "0", "0", "0"] and len(settled) == RECEIPTS + 3
    assert ["00:20", str(SYNC_MS), "≤ 1 s"] in table_rows(page, "Run time, mean and p95")
    waits = table_rows(page, "Wait from run time to start, p95 by queue")
    assert ["reports", "00:24", str(REPORTS), "≤ 5 min", "≤ 5 min"] in waits
    assert ["inventory", "00:20", str(SYNCS), "≤ 10 ms", "≤ 1 s"] in waits
    depths = table_rows(page, "Jobs waiting by queue (sampled)")
    assert depths == [["reports", "00:23", str(REPORTS), "1.0 min"], ["reports", "00:24", str(REPORTS), "2.0 min"]]
    assert f"{CHARGES} dead-lettered in the window" in page
    assert reverse("admin:ultimate_jobs_deadletter_changelist") in page  # the strip links into the list
    one = staff("view_dashboard").get(reverse(PAGE), {"window": "24h", "job": "dash_charge_card"}).content.decode()
    assert table_rows(one, "Jobs settled of dash_charge_card, by outcome") == [["Jan 01 00:00", "0", "0", "0", "4"]]


def test_the_data_view_serves_the_same_read_and_the_pages_body(pg: Env[PostgresDriver]) -> None:
    run = script_hour(pg)
    answer = staff("view_dashboard").get(reverse(DATA), {"window": "1h"})
    assert answer.status_code == 200 and answer["Content-Type"] == "application/json"
    data = answer.json()
    assert [p for p in data["points"] if p["dead"]] == [
        {"at_ms": run.spike_at_ms, "done": 0, "retried": 0, "failed": 0, "dead": CHARGES, "mean_ms": 0.0, "p95_ms": 10}
    ]
    assert "<figcaption>Jobs settled, by outcome</figcaption>" in data["html"]


def test_the_page_refuses_bad_input_and_users_without_its_permission(pg: Env[PostgresDriver]) -> None:
    allowed = staff("view_dashboard")
    for query in ({"window": "2h"}, {"job": " "}, {"job": "a\x00b"}):
        for name in (PAGE, DATA):
            refused = allowed.get(reverse(name), query)
            assert refused.status_code == 400, (name, query)
            assert refused.content.decode().startswith(("X_JOB_ARGUMENT_INVALID: ", "X_JOB_PAGE_INVALID: "))
    for name in (PAGE, DATA):
        assert staff("view_job").get(reverse(name)).status_code == 403
        anonymous = Client().get(reverse(name))
        assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]


def test_the_job_page_and_a_list_of_one_job_link_to_its_charts(pg: Env[PostgresDriver]) -> None:
    script_hour(pg)
    [dead] = operator.list_jobs(name="dash_charge_card", state="dead", limit=1).rows
    charts = f'{reverse(PAGE)}?window=24h&amp;job=dash_charge_card"'
    allowed = staff("view_dashboard", "view_job", "view_deadletter")
    job_page = allowed.get(reverse("admin:ultimate_jobs_job_change", args=[dead.id])).content.decode()
    assert charts in job_page and "charts of dash_charge_card" in job_page
    one_job = allowed.get(reverse("admin:ultimate_jobs_job_changelist"), {"name": "dash_charge_card"}).content.decode()
    assert charts in one_job
    every_job = allowed.get(reverse("admin:ultimate_jobs_job_changelist")).content.decode()
    assert 'id="uj-job-charts"' not in every_job  # no one job to chart
    without = staff("view_job").get(reverse("admin:ultimate_jobs_job_change", args=[dead.id])).content.decode()
    assert 'id="uj-job-charts"' not in without  # a user who may not open the dashboard gets no link to it


def test_a_job_name_that_is_markup_is_shown_as_text_never_run(pg: Env[PostgresDriver]) -> None:
    script_hour(pg)
    hostile = '<script>alert("x")</script>'
    page = staff("view_dashboard").get(reverse(PAGE), {"job": hostile}).content.decode()
    assert hostile not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    data = staff("view_dashboard").get(reverse(DATA), {"job": hostile}).json()
    assert data["job"] == hostile and hostile not in data["html"]  # the JSON carries the name; its HTML escapes it
