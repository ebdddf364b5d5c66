"""The admin's pages laid out as Django's own, on whichever Django runs them (issue 24, point 1): the pages
extend Django's admin templates instead of copying one version's markup, so on Django 5.2 and on 6.1 alike
no page scrolls sideways at 1280 px, the jobs' and dead letters' filter panel sits beside the list (not
under it) with the search help above the list at its width, and every page's breadcrumbs wear the admin's
style — in the light theme, in the dark one the browser asks for (``prefers-color-scheme``), and in the
dark one picked with Django's theme toggle (``data-theme``). The suite runs under both virtualenvs
(``make test``). A screenshot of every page lands in ``tests/browser/artifacts/`` as
``layout-<page>-<theme>-django<version>.png``."""

from __future__ import annotations

from typing import Any

import django
import pytest
from django.urls import reverse
from playwright.sync_api import Browser, Page, expect

from tests.admin_scenario import Scenario, build_scenario
from tests.browser.conftest import log_in, shoot
from tests.conftest import Env
from ultimate_jobs import operator
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WIDTH = 1280
THEMES = {  # name: (the colour scheme the browser prefers, whether Django's theme toggle is clicked)
    "light": ("light", False),
    "dark": ("dark", False),
    "toggled-dark": ("light", True),  # auto (light) → dark: Django's toggle sets data-theme="dark"
}
TRANSPARENT = "rgba(0, 0, 0, 0)"

# The page's frame, measured in the browser: sideways overflow, the breadcrumbs' computed colours beside
# those the admin's CSS variables name (a probe element painted with them), the body's background.
FRAME_JS = """() => {
  const probe = document.createElement("div");
  probe.style.backgroundColor = "var(--breadcrumbs-bg)";
  probe.style.color = "var(--breadcrumbs-link-fg)";
  document.body.append(probe);
  const want = {bg: getComputedStyle(probe).backgroundColor, link: getComputedStyle(probe).color};
  probe.remove();
  const crumbs = document.querySelector(".breadcrumbs");
  const link = crumbs && crumbs.querySelector("a");
  return {
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    crumbs: crumbs && {
      bg: getComputedStyle(crumbs).backgroundColor,
      link: link && getComputedStyle(link).color,
      text: crumbs.innerText,
    },
    want: want,
    body: getComputedStyle(document.body).backgroundColor,
  };
}"""

# Where the list's parts sit on the page: each one's bounding box, or null.
BOXES_JS = """() => Object.fromEntries(
  ["#changelist-filter", "#result_list", "#searchbar_helptext", "#toolbar"].map((selector) => {
    const found = document.querySelector(selector);
    const box = found && found.getBoundingClientRect();
    return [selector, box && {left: box.left, right: box.right, top: box.top, bottom: box.bottom, width: box.width}];
  })
)"""


def luminance(rgb: str) -> float:
    """The lightness (0 black … 1 white) of a computed ``rgb(r, g, b)`` colour."""
    red, green, blue = (int(part) for part in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def check_frame(page: Page, where: str, *, dark: bool) -> None:
    """No sideways scroll, the breadcrumbs styled by the admin's CSS, the theme in effect."""
    frame: dict[str, Any] = page.evaluate(FRAME_JS)
    assert frame["scrollWidth"] <= frame["clientWidth"], f"{where} scrolls sideways: {frame}"
    crumbs = frame["crumbs"]
    assert crumbs is not None and "Home" in crumbs["text"], f"{where} has no breadcrumbs"
    assert frame["want"]["bg"] != TRANSPARENT, frame
    assert crumbs["bg"] == frame["want"]["bg"], f"{where}'s breadcrumbs are not the admin's: {frame}"
    assert crumbs["link"] == frame["want"]["link"], f"{where}'s breadcrumb links are not the admin's: {frame}"
    lightness = luminance(frame["body"])
    assert lightness < 0.2 if dark else lightness > 0.8, f"{where} is not in the {'dark' if dark else 'light'} theme"


def check_list(page: Page, where: str) -> None:
    """The filter panel beside the list, to its right and level with it (not under it); the search help
    between the search bar and the list, as wide as the list rather than squeezed into a column."""
    boxes: dict[str, Any] = page.evaluate(BOXES_JS)
    panel, rows = boxes["#changelist-filter"], boxes["#result_list"]
    help_text, toolbar = boxes["#searchbar_helptext"], boxes["#toolbar"]
    assert panel is not None and rows is not None and help_text is not None and toolbar is not None, (where, boxes)
    assert panel["left"] >= rows["right"], f"{where}: the filters are not to the right of the list: {boxes}"
    assert panel["top"] < rows["bottom"], f"{where}: the filters are under the list: {boxes}"
    assert toolbar["top"] <= help_text["top"] and help_text["bottom"] <= rows["top"], (where, boxes)
    assert help_text["width"] >= rows["width"] / 2, f"{where}: the search help is squeezed: {boxes}"


def choose_action(page: Page, dead_id: str, action: str) -> None:
    """On the dead letters, select ``dead_id``'s row and run ``action`` from Django's action bar."""
    page.locator("#result_list tbody tr", has_text=dead_id).locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


@pytest.mark.slow
@pytest.mark.parametrize("theme", THEMES)
def test_every_page_is_laid_out_as_djangos_own(
    live_server: object, pg: Env[PostgresDriver], browser: Browser, theme: str
) -> None:
    shop: Scenario = build_scenario(pg)
    scheme, toggle = THEMES[theme]
    page = browser.new_context(viewport={"width": WIDTH, "height": 900}, color_scheme=scheme).new_page()
    base = str(live_server)
    log_in(page, base)
    if toggle:
        # Django's theme.js binds the toggle's click on the window's ``load`` event, which can come after the
        # login's redirect has shown the index (a busy machine): a click before it would change nothing.
        page.wait_for_load_state("load")
        page.click("button.theme-toggle")
        expect(page.locator("html")).to_have_attribute("data-theme", "dark")  # kept for the next pages
    dark = scheme == "dark" or toggle
    version = f"django{django.VERSION[0]}.{django.VERSION[1]}"

    lists = {"jobs": "admin:ultimate_jobs_job_changelist", "dead-letters": "admin:ultimate_jobs_deadletter_changelist"}
    for name, url in lists.items():
        page.goto(base + reverse(url))
        expect(page.locator("#result_list")).to_contain_text(shop.dead_id)
        shoot(page, f"layout-{name}-{theme}-{version}")  # before the checks: a failure's picture too
        check_frame(page, name, dark=dark)
        check_list(page, name)
    page.goto(base + reverse(lists["jobs"]) + "?q=order:1042&queue=payments")  # searched and filtered
    check_frame(page, "a filtered list", dark=dark)
    check_list(page, "a filtered list")

    others = {
        "job": reverse("admin:ultimate_jobs_deadletter_change", args=[shop.dead_id]),
        **{
            name: reverse(f"admin:ultimate_jobs_{model}_changelist")
            for name, model in [
                ("queues", "queue"),
                ("workers", "worker"),
                ("tasks", "scheduledtask"),
                ("outbox", "outboxrow"),
                ("backfills", "backfill"),
                ("webhook-deliveries", "webhookdelivery"),
                ("webhook-endpoints", "webhookendpointstate"),
            ]
        },
    }
    for name, url in others.items():
        page.goto(base + url)
        shoot(page, f"layout-{name}-{theme}-{version}")
        check_frame(page, name, dark=dark)

    page.goto(base + reverse(lists["dead-letters"]))
    choose_action(page, shop.dead_id, "retry_from_step")
    expect(page.locator("select#uj-step")).to_contain_text("authorize")
    shoot(page, f"layout-retry-from-step-{theme}-{version}")
    check_frame(page, "the retry-from-step form", dark=dark)
    page.goto(base + reverse(lists["dead-letters"]))
    choose_action(page, shop.dead_id, "remove")
    expect(page.locator("#content-main")).to_contain_text("Yes, remove 1 job")
    shoot(page, f"layout-remove-{theme}-{version}")
    check_frame(page, "the remove confirmation", dark=dark)
    assert operator.inspect_job(shop.dead_id).job.state == "dead"  # asked, nothing moved
