"""The demo shop's checkout through the transactional outbox: the Order row and its ``confirm_order`` job
are written in ONE ``transaction.atomic()`` block. A committed checkout is relayed and runs; a checkout
whose card is declined rolls back and leaves neither an order nor a job.

Runs in-process on the demo database's driver (SQLite or Postgres) and a frozen clock, with the outbox
router installed for the part (``mode="required"``: an enqueue outside a transaction would be
``X_OUTBOX_NO_TX``), a relay driven one pass at a time, and ``run_jobs`` over the ``checkout`` queue only.
``shop_demo`` prints the lines :func:`run_outbox_part` answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from django.db import transaction

from ultimate_jobs import set_job_clock, set_job_driver
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.models import OutboxRow
from ultimate_jobs.outbox import OutboxRouter, outbox_relay
from ultimate_jobs.testing import FrozenClock, run_jobs

from .backend import DemoDriver, demo_driver, demo_outbox_store
from .jobs import confirm_order
from .models import Order
from .services import ShopServices

ORG = "org-acme"  # a demo org: the main scenario's seed_orders() clears its orders on every run
COMMITTED, DECLINED = "1003", "1004"
STARTS_AT = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


class CardDeclined(Exception):
    """The payment step of a checkout failed: the checkout's transaction rolls back."""


@contextmanager
def outbox_installed(clock: FrozenClock, driver: DemoDriver) -> Iterator[OutboxRouter]:
    """The clock, the driver and the outbox router, installed process-wide for the block."""
    router = OutboxRouter(store=demo_outbox_store(clock), driver=driver, mode="required")
    set_job_clock(clock)
    set_job_driver(driver)
    set_jobs_router(router)
    try:
        yield router
    finally:
        set_jobs_router(None)
        set_job_driver(None)
        set_job_clock(None)


def checkout(number: str, *, declined: bool = False) -> str:
    """One checkout: the Order row and its confirmation job in ONE transaction. Answers the job id
    ``enqueue()`` returned inside it (the staged row's id IS the job id)."""
    job_id = ""
    try:
        with transaction.atomic():
            Order.objects.create(org_id=ORG, number=number, total_cents=2_500)
            job_id = confirm_order.enqueue({"org_id": ORG, "number": number}).id
            if declined:
                raise CardDeclined(f"the card for order {number} was declined")
    except CardDeclined:
        pass
    return job_id


def run_outbox_part() -> list[str]:
    """Run the two checkouts, the relay and the worker pass; answer printable lines."""
    clock = FrozenClock(start_ms=int(STARTS_AT.timestamp() * 1000))
    driver = demo_driver(clock)
    shop = ShopServices()
    Order.objects.filter(org_id=ORG, number__in=(COMMITTED, DECLINED)).delete()
    OutboxRow.objects.all().delete()
    lines = ["transactional outbox: the checkout writes the Order row and enqueues confirm_order in ONE atomic()"]
    with outbox_installed(clock, driver) as router:
        kept = checkout(COMMITTED)
        lost = checkout(DECLINED, declined=True)
        staged = router.store.backlog()
        jobs_before = sum(driver.operator.get(job_id) is not None for job_id in (kept, lost))
        lines.append(
            f"  order {COMMITTED}: committed — enqueue() answered job {kept[-8:]} inside the transaction; "
            f"x_outbox holds {staged} staged row, x_jobs {jobs_before} (nothing runs before the relay)"
        )
        lines.append(
            f"  order {DECLINED}: the card was declined and the transaction rolled back — Order rows "
            f"{Order.objects.filter(org_id=ORG, number=DECLINED).count()}, x_outbox rows for job {lost[-8:]} "
            f"{OutboxRow.objects.filter(id=lost).count()}"
        )
        relay = outbox_relay(store=router.store, driver=driver, clock=clock, relay_id="demo-relay")
        published = relay.run_once()
        lines.append(f"  relay: published {published} row after the COMMIT, under its own id (the job id)")
        report = run_jobs(driver, clock=clock, queues=["checkout"], context=lambda: shop, advance=False)
    for job_id, number in ((kept, COMMITTED), (lost, DECLINED)):
        record = driver.operator.get(job_id)
        runs = [e.outcome for e in report.executions if e.job_id == job_id]
        if record is None:
            lines.append(f"  confirm_order for order {number}: no job exists — it never ran ({len(runs)} runs)")
        else:
            lines.append(
                f"  confirm_order {job_id[-8:]} for order {number}: {record.state}, attempt {record.attempts} "
                f"of {record.max_attempts}, outcomes {', '.join(o or '-' for o in runs)}"
            )
    order = Order.objects.get(org_id=ORG, number=COMMITTED)
    lines.append(f"  order {COMMITTED}: confirmation emails sent {order.emailed}; mail log {shop.mailer.sent}")
    return lines
