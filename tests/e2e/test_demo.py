"""``manage.py shop_demo`` (what ``make demo`` runs): the scenario ends the way the demo says it does."""

from __future__ import annotations

from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from demo_project.shop.models import Order

# One session-scoped demo run serves every test here: in one xdist group they share it, instead of each
# xdist worker that picks up one of these tests running the whole demo again.
pytestmark = [pytest.mark.postgres, pytest.mark.xdist_group("shop_demo")]

ORDER_COLUMNS = ("org_id", "number", "status", "charges", "emailed")

JOB_COLUMNS = ("job", "id", "state", "attempts", "outcomes", "note")


def table_rows(output: str) -> list[dict[str, str]]:
    """The jobs table in printed order; a wrapped note is joined back into one string."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split(" | ")[0].strip() == "job")
    rows: list[dict[str, str]] = []
    for line in lines[start + 2 :]:
        if " | " not in line:
            break
        cells = [cell.strip() for cell in line.split(" | ")]
        if cells[0]:
            rows.append(dict(zip(JOB_COLUMNS, cells, strict=False)))
        elif rows:
            rows[-1]["note"] = f"{rows[-1]['note']} {cells[-1]}"
    return rows


def job_rows(output: str) -> dict[str, dict[str, str]]:
    """The jobs table by job name (the last row of a name that appears twice)."""
    return {row["job"]: row for row in table_rows(output)}


def shop_orders() -> list[tuple[Any, ...]]:
    return sorted(Order.objects.values_list(*ORDER_COLUMNS))


@dataclass(frozen=True)
class DemoRun:
    """What one ``shop_demo`` run printed and the orders it left behind."""

    output: str
    orders: list[tuple[Any, ...]]

    def order(self, org_id: str, number: str) -> dict[str, Any]:
        (found,) = [o for o in self.orders if o[:2] == (org_id, number)]
        return dict(zip(ORDER_COLUMNS, found, strict=True))


@pytest.fixture(scope="session")
def demo(django_db_setup: None, django_db_blocker: Any) -> DemoRun:
    """ONE ``shop_demo`` run for the whole test session (it takes seconds): the tests below read what it
    printed and the orders it left, read before the tables are flushed again — as a transactional test's
    teardown would, so the demo's rows reach no other test."""
    out = StringIO()
    with django_db_blocker.unblock():
        call_command("shop_demo", stdout=out)
        orders = shop_orders()
        call_command("flush", verbosity=0, interactive=False)
    return DemoRun(out.getvalue(), orders)


@pytest.fixture
def output(demo: DemoRun) -> str:
    return demo.output


def test_fulfil_order_charges_once_replays_and_sleeps(demo: DemoRun) -> None:
    row = job_rows(demo.output)["fulfil_order"]
    assert row["state"] == "done"
    assert row["attempts"] == "2 of 3"
    assert row["outcomes"] == "retried → suspended → completed"
    assert "charges=1" in row["note"]
    assert "slept 3d" in row["note"]
    order = demo.order("org-acme", "1001")
    assert (order["charges"], order["emailed"], order["status"]) == (1, 2, Order.Status.FULFILLED)


def test_retried_job_succeeds(output: str) -> None:
    row = job_rows(output)["book_shipment"]
    assert (row["state"], row["attempts"], row["outcomes"]) == ("done", "3 of 5", "retried → retried → completed")


def test_transient_failure_is_dead_lettered_after_its_attempts(output: str) -> None:
    row = job_rows(output)["sync_inventory"]
    assert (row["state"], row["attempts"], row["outcomes"]) == ("dead", "3 of 3", "retried → retried → dead-lettered")
    assert "X_WAREHOUSE_BUSY: warehouse wh-east answered 503" in output
    assert "[attempts-exhausted] stopped on attempt 3 of 3" in output


def test_terminal_code_is_dead_lettered_on_attempt_one(output: str) -> None:
    row = job_rows(output)["issue_refund"]
    assert (row["state"], row["attempts"], row["outcomes"]) == ("dead", "1 of 5", "dead-lettered")
    assert "[terminal] stopped on attempt 1 of 5" in output
    assert "issue_refund dead-lettered on attempt 1 (X_REFUND_REJECTED)" in output  # its on_settled paged


def test_cross_tenant_report_counts_every_org(output: str) -> None:
    row = job_rows(output)["daily_sales_report"]
    assert row["state"] == "done"
    assert "3 orders across 2 orgs" in row["note"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # this one runs the demo again, on committed rows
def test_a_second_run_starts_from_a_clean_shop(demo: DemoRun) -> None:
    call_command("shop_demo", stdout=StringIO())  # the session's run left its rows: the demo clears its own
    call_command("shop_demo", stdout=StringIO())
    assert shop_orders() == demo.orders
    assert Order.objects.get(org_id="org-acme", number="1001").charges == 1


def test_a_worker_stops_a_hung_body_at_its_timeout(output: str) -> None:
    row = job_rows(output)["settle_payouts"]
    assert (row["state"], row["attempts"], row["outcomes"]) == ("dead", "1 of 1", "dead-lettered")
    assert "X_JOB_TIMEOUT: settle_payouts: the attempt passed its timeout of 30000 ms" in output
    assert "settle_payouts dead-lettered on attempt 1 (X_JOB_TIMEOUT)" in output


def test_a_second_run_of_a_busy_key_is_refused(output: str) -> None:
    syncs = [row for row in table_rows(output) if row["job"] == "sync_account"]
    assert [(r["state"], r["attempts"], r["outcomes"]) for r in syncs] == [
        ("done", "1 of 3", "completed"),
        ("failed", "0 of 3", "refused"),
    ]
    assert "X_JOB_KEY_BUSY" in syncs[1]["note"]
    assert "sync_account refused on attempt 1 (X_JOB_KEY_BUSY)" in output
