"""The demo's scheduler part (``demo_project.shop.scenario_scheduler``): the nightly task fired by hand and
a job that waits for an event the scenario publishes, on the Postgres driver and event bus."""

from __future__ import annotations

import pytest

from demo_project.shop.models import Order
from demo_project.shop.scenario_scheduler import run_scheduler_part
from demo_project.shop.tasks import nightly_sales_report

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_nightly_task_fires_by_hand_and_the_waiting_job_resumes_on_the_published_event() -> None:
    lines = run_scheduler_part()
    text = "\n".join(lines)
    assert lines[0].startswith("task nightly_sales_report: cron '0 3 * * *' tz Europe/Berlin, catch-up skip")
    assert "fired by hand at Tue 2026-01-06 03:00 CET: 1 job(s)" in text
    assert "completed — 2026-01-05:" in text  # the day that ended, by the shop's calendar
    assert "the scheduler's next fire: Wed 2026-01-07 03:00 CET" in text
    assert "suspended (waiting on bank.transfer.received" in text
    assert "next poll: completed — reference TRF-2026-0042; order 1003 is now paid" in text
    assert Order.objects.get(org_id="org-acme", number="1003").status == Order.Status.PAID


def test_the_nightly_task_is_autodiscovered_and_describes_its_job() -> None:
    assert nightly_sales_report.describe().jobs == ("daily_sales_report",)
