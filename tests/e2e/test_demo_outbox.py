"""The demo's outbox part (``demo_project.shop.scenario_outbox``): a committed checkout's job is relayed
and runs once; a rolled-back checkout leaves no order, no outbox row and no job."""

from __future__ import annotations

import pytest

from demo_project.shop.models import Order
from demo_project.shop.scenario_outbox import COMMITTED, DECLINED, ORG, run_outbox_part
from ultimate_jobs.core.routing import DirectRouter, jobs_router

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_outbox_part_runs_the_committed_checkout_and_nothing_for_the_rolled_back_one() -> None:
    lines = run_outbox_part()
    text = "\n".join(lines)
    assert "x_outbox holds 1 staged row, x_jobs 0" in text
    assert f"order {DECLINED}: the card was declined and the transaction rolled back — Order rows 0" in text
    assert "relay: published 1 row" in text
    assert f"for order {COMMITTED}: done, attempt 1 of 3, outcomes completed" in text
    assert f"confirm_order for order {DECLINED}: no job exists — it never ran (0 runs)" in text
    assert Order.objects.get(org_id=ORG, number=COMMITTED).emailed == 1
    assert not Order.objects.filter(org_id=ORG, number=DECLINED).exists()
    assert isinstance(jobs_router(), DirectRouter)  # the part puts the direct fallback back
