"""The admin in a real browser (issue 7, acceptance): an operator logs into a live server, opens the
dead letters, retries one, and the job runs; then opens the backfill ledger and a pass's job. Screenshots
of every page land in ``tests/browser/artifacts/`` (git-ignored) for a person to look at.

Drives Debian's ``chromium`` through Playwright's Python package — ``make browser`` installs chromium
(``make test`` runs it); Playwright never downloads a browser here.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from tests.admin_scenario import Scenario, build_scenario
from tests.browser.conftest import ARTIFACTS, log_in, shoot
from tests.conftest import Env
from tests.secapp.models import Post
from ultimate_jobs import backfill, operator
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.testing import run_jobs

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.slow
def test_an_operator_retries_a_dead_letter_and_it_runs(
    live_server: object, pg: Env[PostgresDriver], page: Page
) -> None:
    shop: Scenario = build_scenario(pg)
    base = str(live_server)

    log_in(page, base)
    expect(page.locator("#content-main")).to_contain_text("Dead letters")

    page.goto(base + reverse("admin:ultimate_jobs_job_changelist"))
    shoot(page, "jobs")
    page.goto(base + reverse("admin:ultimate_jobs_deadletter_change", args=[shop.dead_id]))
    expect(page.locator("pre.uj-pre").first).to_contain_text("GatewayDown")
    shoot(page, "job-dead")

    page.goto(base + reverse("admin:ultimate_jobs_deadletter_changelist"))
    row = page.locator("#result_list tbody tr", has_text=shop.dead_id)
    expect(row).to_contain_text("GatewayDown")  # why it died
    shoot(page, "dead-letters")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "retry_from_step")
    page.click("button[name=index]")
    expect(page.locator("select#uj-step")).to_contain_text("authorize")  # the steps the run completed
    shoot(page, "retry-from-step")
    page.click("text=Cancel")  # changed our mind: back to the list, nothing moved
    assert operator.inspect_job(shop.dead_id).job.state == "dead"

    shop.gateway["up"] = True  # the gateway is back: the retry's capture goes through
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "retry")
    page.click("button[name=index]")
    expect(page.locator("ul.messagelist li.success")).to_contain_text(f"Retried 1 job: {shop.dead_id}")
    expect(page.locator(".uj-empty")).to_contain_text("No dead letters")  # the queue is empty now
    shoot(page, "dead-letters-after-retry")

    report = run_jobs(pg.driver, clock=pg.clock, queues=["payments"])
    assert report.outcomes["completed"] == 1
    assert operator.inspect_job(shop.dead_id).job.state == "done"

    page.goto(base + reverse("admin:ultimate_jobs_job_change", args=[shop.dead_id]))
    expect(page.locator(".uj-title")).to_contain_text("done")
    expect(page.locator("table.uj-timeline")).to_contain_text("capture")
    shoot(page, "job")
    page.goto(base + reverse("admin:ultimate_jobs_queue_changelist"))
    expect(page.locator("#uj-queues")).to_contain_text("payments")
    shoot(page, "queues")
    page.goto(base + reverse("admin:ultimate_jobs_worker_changelist"))
    shoot(page, "workers")
    page.goto(base + reverse("admin:ultimate_jobs_scheduledtask_changelist"))
    shoot(page, "tasks")

    # the backfill ledger: a pass swept, its row on the Backfills tab, its job one click away
    Post.objects.bulk_create(Post(title=f"Post {i}") for i in range(3))
    sweep = backfill(name="rewrite-slugs", tenant="none", rate=1_000, source=lambda ctx: Post.objects.all(),
                     handle=lambda rows, signal: None)  # fmt: skip
    enqueued = sweep.enqueue()
    run_jobs(pg.driver, clock=pg.clock)
    assert operator.inspect_job(enqueued.id).job.state == "done"
    page.click(".uj-tabs >> text=Backfills")
    ledger = page.locator("#uj-backfills tbody tr", has_text="rewrite-slugs")
    expect(ledger).to_contain_text("completed")
    expect(page.locator("#uj-backfills-declared")).to_contain_text("rewrite-slugs")
    shoot(page, "backfills")
    ledger.locator("a.uj-job-link").click()
    expect(page.locator("#content-main")).to_contain_text(enqueued.id)
    assert (ARTIFACTS / "queues.png").stat().st_size > 10_000 and (ARTIFACTS / "job.png").stat().st_size > 10_000
