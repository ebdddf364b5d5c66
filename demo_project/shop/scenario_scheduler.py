"""The demo's scheduler and event part: the nightly task fired by hand, and a job that waits for an event
this scenario publishes. ``run_scheduler_part()`` answers printable lines; the ``shop_demo`` command
prints them after the main scenario.

It runs on the demo database's driver with a frozen job clock (Tuesday 03:00 in Berlin, the nightly task's
own instant) and that database's stored event bus — whose clock is the database's (on SQLite, the one
host's), so the wait is stamped and judged on the same clock the publish is, whatever the job clock says.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from ultimate_jobs import next_task_run, publish_event, set_event_bus, set_job_clock, set_job_driver
from ultimate_jobs.events import reset_event_bus
from ultimate_jobs.testing import FrozenClock, run_jobs

from .backend import DemoDriver, demo_driver, demo_event_bus
from .jobs import await_bank_transfer
from .models import Order
from .tasks import SHOP_ZONE, nightly_sales_report

TUESDAY_3AM_BERLIN = datetime(2026, 1, 6, 3, 0, tzinfo=SHOP_ZONE)
TRANSFER_ORDER = ("org-acme", "1003")


@contextmanager
def _installed(clock: FrozenClock, driver: DemoDriver) -> Iterator[None]:
    set_job_clock(clock)
    set_job_driver(driver)
    set_event_bus(demo_event_bus(driver))
    try:
        yield
    finally:
        set_job_driver(None)
        set_job_clock(None)
        reset_event_bus()


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, SHOP_ZONE).strftime("%a %Y-%m-%d %H:%M %Z")


def run_scheduler_part() -> list[str]:
    """Fire the nightly task by hand and run a job that waits for an event; answer what happened."""
    clock = FrozenClock(start_ms=int(TUESDAY_3AM_BERLIN.timestamp() * 1000))
    driver = demo_driver(clock)
    lines: list[str] = []
    with _installed(clock, driver):
        lines += _nightly_task(clock, driver)
        lines.append("")
        lines += _event_wait(clock, driver)
    return lines


def _nightly_task(clock: FrozenClock, driver: DemoDriver) -> list[str]:
    described = nightly_sales_report.describe()
    now = clock.now_ms()
    answers = nightly_sales_report.enqueue()  # by hand: every entry now, with the job's own idempotency key
    report = run_jobs(driver, clock=clock, queues=["reports"], advance=False)
    ran = {e.job_id: e for e in report.executions}
    lines = [
        f"task {described.name}: cron '{described.cron}' tz {described.tz}, catch-up {described.catch_up}; "
        f"enqueues {', '.join(described.jobs)}",
        f"  fired by hand at {_when(now)}: {len(answers)} job(s)",
    ]
    for answer in answers:
        execution = ran.get(answer.id)
        result: Any = execution.result if execution is not None else None
        outcome = execution.outcome if execution is not None else "not run"
        if isinstance(result, dict):
            detail = f"{result['day']}: {result['orders']} order(s) across {result['orgs']} org(s)"
        else:
            detail = "-"
        lines.append(f"  daily_sales_report {answer.id[-8:]} {outcome} — {detail}")
    lines.append(f"  the scheduler's next fire: {_when(next_task_run(nightly_sales_report, now))}")
    return lines


def _event_wait(clock: FrozenClock, driver: DemoDriver) -> list[str]:
    org_id, number = TRANSFER_ORDER
    Order.objects.update_or_create(
        org_id=org_id, number=number, defaults={"total_cents": 12_500, "status": Order.Status.PLACED}
    )
    queued = await_bank_transfer.enqueue({"org_id": org_id, "number": number})
    first = run_jobs(driver, clock=clock, queues=["payments"], advance=False)
    waiting = [e.outcome for e in first.executions if e.job_id == queued.id]
    published = publish_event(
        "bank.transfer.received",
        {"org_id": org_id, "order": number, "reference": "TRF-2026-0042", "amount_cents": 12_500},
    )
    clock.advance(60_000)  # the job's event_poll: the parked run is due again
    second = run_jobs(driver, clock=clock, queues=["payments"], advance=False)
    done = next((e for e in second.executions if e.job_id == queued.id), None)
    order = Order.objects.get(org_id=org_id, number=number)
    published_at = datetime.fromtimestamp(published.published_at_ms / 1000, UTC).strftime("%H:%M:%S UTC")
    return [
        f"await_bank_transfer {queued.id[-8:]} for order {number}: {' → '.join(waiting) or '-'} "
        "(waiting on bank.transfer.received, holding no process)",
        f"  published bank.transfer.received for order {number}, stamped {published_at} by the bus clock",
        f"  next poll: {done.outcome if done else 'not run'} — reference "
        f"{(done.result or {}).get('reference', '-') if done else '-'}; order {number} is now {order.status}",
    ]
