"""The demo's maintenance part: a backfill over the orders, and the app's own retention sweep.

``settle_charged_orders`` (demo_project/shop/jobs.py) is a backfill: it pages the orders the gateway
charged that never left ``placed`` by primary key, two per step, and writes one row in the
``x_backfills`` ledger. A second enqueue is answered ``skipped`` from that ledger; ``force`` sweeps again.
Then the clock moves on eight days and ``x.purge`` — the sweep the app declares for its own tables —
removes the finished job rows past their retention (done: 7 days). ``run_maintenance_part()`` answers
printable lines; the ``shop_demo`` command prints them after the other parts.

It runs on the demo database's driver (SQLite or Postgres) with a frozen job clock, in this process
(``run_jobs``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ultimate_jobs import operator, set_job_clock, set_job_driver
from ultimate_jobs.features.retention import retention_sweep
from ultimate_jobs.testing import FrozenClock, run_jobs

from .backend import DemoDriver, demo_driver, finished_rows
from .jobs import settle_charged_orders
from .models import Order

DAY_MS = 86_400_000
STRANDED = [("org-acme", "2001", 1_200), ("org-acme", "2002", 800), ("org-globex", "2001", 4_500)]


@contextmanager
def _installed(clock: FrozenClock, driver: DemoDriver) -> Iterator[None]:
    set_job_clock(clock)
    set_job_driver(driver)
    try:
        yield
    finally:
        set_job_driver(None)
        set_job_clock(None)


def run_maintenance_part() -> list[str]:
    """Sweep the stranded orders with a backfill, then run the retention sweep a week later."""
    clock = FrozenClock()
    driver = demo_driver(clock)
    with _installed(clock, driver):
        return [*_backfill(clock), "", *_retention(clock, driver)]


def _backfill(clock: FrozenClock) -> list[str]:
    for org, number, cents in STRANDED:  # charged, but never marked paid: what the backfill repairs
        Order.objects.update_or_create(
            org_id=org,
            number=number,
            defaults={"total_cents": cents, "charged": True, "charges": 1, "status": Order.Status.PLACED},
        )
    lines = [f"backfill {settle_charged_orders.name}: batch 2, rate 50 pages/s, over every org"]
    # force: the demo database keeps its ledger between runs, so a second `make demo` sweeps again
    settle_charged_orders.enqueue({"force": True})
    run_jobs(clock=clock)
    newest = operator.inspect_backfills(name=settle_charged_orders.name, limit=1)[0].run
    lines.append(
        f"  pass {newest.status}: {newest.rows_processed} order(s) in {newest.batches} page(s) "
        f"(one step per page), cursor {newest.last_cursor}"
    )
    paid = Order.objects.filter(number__in=[n for _, n, _ in STRANDED], status=Order.Status.PAID).count()
    lines.append(f"  stranded orders now paid: {paid} of {len(STRANDED)}")
    again = settle_charged_orders.enqueue({})
    report = run_jobs(clock=clock)
    answer = next((e.result for e in report.executions if e.job_id == again.id), None)
    ledger = operator.inspect_backfills(name=settle_charged_orders.name, limit=200)
    skipped = isinstance(answer, dict) and answer.get("skipped") is True
    previous = str(answer.get("previous_run_id", ""))[:13] if isinstance(answer, dict) else ""
    lines.append(
        f"  enqueued again without force: skipped={skipped}, pointing at the completed pass (run {previous}…)"
        if skipped
        else f"  enqueued again without force: answered {answer}"
    )
    lines.append(f"  the ledger holds {len(ledger)} pass(es) of it (python manage.py jobs_backfill --list)")
    return lines


def _retention(clock: FrozenClock, driver: DemoDriver) -> list[str]:
    before = finished_rows(driver)
    clock.advance(8 * DAY_MS)  # a week and a day later: the done rows of this part are past their 7 days
    sweep = retention_sweep.enqueue({})
    report = run_jobs(clock=clock)
    result = next((e.result for e in report.executions if e.job_id == sweep.id), None)
    return [
        "retention: x.purge, the app's own sweep (hourly via the x.purge.hourly task in production)",
        f"  eight days later it answered {result}",
        f"  finished job rows {before} -> {finished_rows(driver)} (the rows past their retention went with their "
        "steps, in bounded batches; the sweep's own row is new; younger and live rows are untouched)",
    ]
