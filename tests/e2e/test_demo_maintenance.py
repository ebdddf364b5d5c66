"""The demo's maintenance part (``demo_project.shop.scenario_maintenance``): a backfill over the orders with
its ledger, and the app's own retention sweep a week later, on the Postgres driver."""

from __future__ import annotations

import pytest

from demo_project.shop.models import Order
from demo_project.shop.scenario_maintenance import STRANDED, run_maintenance_part
from ultimate_jobs import operator
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_backfill_repairs_every_stranded_order_and_the_sweep_removes_what_is_past_retention() -> None:
    text = "\n".join(run_maintenance_part())
    assert "pass completed: 3 order(s) in 2 page(s) (one step per page)" in text
    assert "stranded orders now paid: 3 of 3" in text
    assert "enqueued again without force: skipped=True" in text
    ledger = operator.inspect_backfills(name="shop.settle-charged-orders", driver=PostgresDriver())
    assert [(r.run.status, r.run.rows_processed) for r in ledger] == [("completed", 3)]
    assert Order.objects.filter(number__in=[n for _, n, _ in STRANDED], status=Order.Status.PAID).count() == 3
    assert "eight days later it answered {'x_jobs': 2," in text  # the two backfill runs, past 7 days
