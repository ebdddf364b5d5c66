"""The dashboard in a real browser (issue 30, acceptance): after a scripted hour — receipts sent steadily, a
spike of card charges dead-lettered at once, a slow inventory sync, reports waiting two minutes for a worker —
an operator opens the dashboard and its charts show it (the table behind each chart, read the way a screen
reader would), in the light theme and in the dark one, and the page picks up new failures by itself, without
a reload. Screenshots land in ``tests/browser/artifacts/`` as ``dashboard-<theme>-django<version>.png``."""

from __future__ import annotations

from typing import Any

import django
import pytest
from django.urls import reverse
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import log_in, shoot
from tests.conftest import Env
from tests.dashboard_scenario import CHARGES, RECEIPTS, REPORTS, SYNC_MS, SYNCS, script_hour
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# The colours the page paints, measured in the browser: the body's background and each outcome's bar fill.
PAINT_JS = """() => {
  const fill = (css) => {
    const bar = document.querySelector("rect." + css);
    return bar && getComputedStyle(bar).fill;
  };
  const body = getComputedStyle(document.body).backgroundColor;
  return {body: body, done: fill("uj-fill-done"), dead: fill("uj-fill-dead")};
}"""


def luminance(rgb: str) -> float:
    """The lightness (0 black … 1 white) of a computed ``rgb(r, g, b)`` colour."""
    red, green, blue = (int(part) for part in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def chart_rows(page: Page, caption: str) -> list[list[str]]:
    """The rows of the table behind the chart captioned ``caption``, opened as a reader would."""
    figure = page.locator("figure.uj-chart", has=page.locator("figcaption", has_text=caption))
    figure.locator("details summary").click()
    rows = figure.locator("details tbody tr")
    return [[cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()] for i in range(rows.count())]


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_dashboard_shows_the_scripted_hour_and_refreshes_itself(
    live_server: object, pg: Env[PostgresDriver], browser: Browser, scheme: str
) -> None:
    run = script_hour(pg)
    page = browser.new_context(viewport={"width": 1280, "height": 1000}, color_scheme=scheme).new_page()
    base = str(live_server)
    log_in(page, base)
    page.goto(base + reverse("admin:app_list", args=["ultimate_jobs"]))
    page.click("#uj-dashboard-link a")  # the dashboard heads the app's section
    expect(page.locator("h1")).to_have_text("Dashboard")
    expect(page.locator(".uj-tabs a.uj-current")).to_have_text("Dashboard")

    settled = chart_rows(page, "Jobs settled, by outcome")
    assert settled[0] == ["00:00", "1", "0", "0", "0"] and len(settled) == RECEIPTS + 3
    assert ["00:10", "0", "0", "0", str(CHARGES)] in settled  # the failure spike, in its minute
    assert ["00:20", str(SYNCS), "0", "0", "0"] in settled
    assert ["00:20", str(SYNC_MS), "≤ 1 s"] in chart_rows(page, "Run time, mean and p95")  # the slow sync
    waits = chart_rows(page, "Wait from run time to start, p95 by queue")
    assert ["reports", "00:24", str(REPORTS), "≤ 5 min", "≤ 5 min"] in waits  # the slow queue
    assert all(row[4] == "≤ 10 ms" for row in waits if row[0] == "emails")
    expect(page.locator("figure.uj-chart path.uj-line")).not_to_have_count(0)
    depths = chart_rows(page, "Jobs waiting by queue (sampled)")  # the slow queue's backlog, as sampled
    assert depths == [["reports", "00:23", str(REPORTS), "1.0 min"], ["reports", "00:24", str(REPORTS), "2.0 min"]]
    dead_item = page.locator('#uj-attention li[data-kind="dead_letters"]')
    expect(dead_item).to_have_text(f"{CHARGES} dead-lettered in the window")
    expect(dead_item).to_have_class("uj-attention-item uj-attention-on")

    paint: dict[str, Any] = page.evaluate(PAINT_JS)
    background = luminance(paint["body"])
    assert background < 0.2 if scheme == "dark" else background > 0.8, paint
    for outcome in ("done", "dead"):  # each bar stands out from the page in either theme
        assert abs(luminance(paint[outcome]) - background) > 0.25, (outcome, paint)
    shoot(page, f"dashboard-{scheme}-django{django.VERSION[0]}.{django.VERSION[1]}")

    page.evaluate("() => { window.ujSamePage = true; }")  # gone if the page reloads or navigates
    for n in range(CHARGES, CHARGES + 3):  # three more charges die while the page is open
        run.charge.enqueue({"n": n})
    run_jobs(clock=pg.clock, advance=False)
    expect(page.locator('#uj-totals [data-outcome="dead"]')).to_have_text(str(CHARGES + 3), timeout=20_000)
    expect(dead_item).to_have_text(f"{CHARGES + 3} dead-lettered in the window")
    expect(page.locator("#uj-dash-status")).to_contain_text("updated")
    assert page.evaluate("() => window.ujSamePage") is True  # refreshed in place, not reloaded


@pytest.mark.slow
def test_one_jobs_charts_are_a_click_from_its_job_page(
    live_server: object, pg: Env[PostgresDriver], browser: Browser
) -> None:
    run = script_hour(pg)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    base = str(live_server)
    log_in(page, base)
    page.goto(base + reverse("admin:ultimate_jobs_job_changelist") + "?name=dash_charge_card")
    page.click("#result_list tbody tr >> nth=0 >> a")
    page.click("#uj-job-charts")
    expect(page.locator("h1")).to_have_text("Dashboard")
    assert chart_rows(page, "Jobs settled of dash_charge_card, by outcome") == [["Jan 01 00:00", "0", "0", "0", "4"]]
    assert run.charge.name == "dash_charge_card"
