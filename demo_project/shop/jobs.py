"""The demo shop's background work. ultimate_jobs imports this module at start-up (autodiscovery).

Each job shows one behaviour:

- ``fulfil_order``: durable steps. The card is charged in a plain step (the gateway is outside the
  database); the order is marked paid in a transactional step, its row and the step's checkpoint
  committed together. The receipt email fails once; attempt 2 replays ``charge`` and ``mark-paid``
  from storage (the card is charged once), then the run sleeps three days without holding a process
  and sends a nudge.
- ``book_shipment``: a flaky carrier API; the run retries on the backoff and succeeds.
- ``sync_inventory``: a warehouse that stays down; retried at its Retry-After, then dead-lettered.
- ``issue_refund``: a terminal code; dead-lettered on attempt 1, the other attempts unspent.
- ``reconcile_payment``: the payment provider's API contract, 5 calls a second per org
  (``PAYMENT_GATEWAY``, a rate limit across every worker), on the fair ``payments`` queue.
- ``daily_sales_report``: ``tenant="none"``; counts orders of every org inside ``cross_tenant()``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any, TypeVar

from django.db.models import Count, F
from pydantic import BaseModel, Field

from ultimate_jobs import (
    Concurrency,
    JobRun,
    RateLimit,
    Settled,
    backfill,
    cross_tenant,
    job,
    job_clock,
    job_driver,
    register_error_retry,
)

from .models import Order
from .services import MAIL_TEMPORARY, REFUND_REJECTED, WAREHOUSE_BUSY, ShopServices

T = TypeVar("T")

# Classify the shop's codes where the jobs that meet them live. An unclassified code (or a plain
# Python exception such as TimeoutError) follows the backoff schedule.
register_error_retry(
    {
        MAIL_TEMPORARY: "retryable",  # the relay will take it in a moment: the backoff schedule
        WAREHOUSE_BUSY: "retry-after",  # the warehouse names when to come back (meta.retryAfterSeconds)
        REFUND_REJECTED: "terminal",  # retrying cannot create a charge: dead-letter now
    }
)


class OrderRef(BaseModel):
    """One order of one org."""

    org_id: str = Field(min_length=1)
    number: str = Field(min_length=1)


class RefundRequest(OrderRef):
    """A refund the customer asked for."""

    reason: str


class InventorySync(BaseModel):
    """Pull one warehouse's stock levels for one org."""

    org_id: str = Field(min_length=1)
    warehouse: str = Field(min_length=1)


class SalesReportInput(BaseModel):
    """The day to total."""

    day: date


def _order(ref: OrderRef) -> Order:
    return Order.objects.get(org_id=ref.org_id, number=ref.number)


def _customer(order: Order) -> str:
    return f"customer-{order.number}@{order.org_id}.example"


# -- on_settled hooks: told once per ending, under the job's tenant --------------------------------


def record_fulfilment(settled: Settled) -> None:
    """The order's status column follows how fulfilment ended (a notification, not a guarantee)."""
    if settled.input is None:  # the stored payload no longer parses: nothing to point at
        return
    status = Order.Status.FULFILLED if settled.outcome == "completed" else Order.Status.ATTENTION
    Order.objects.filter(org_id=settled.input.org_id, number=settled.input.number).update(status=status)


def page_on_failure(settled: Settled) -> None:
    """Page whoever is on call when a run ends in anything but ``completed``."""
    if settled.outcome == "completed" or not isinstance(settled.ctx, ShopServices):
        return
    settled.ctx.page_on_call(f"{settled.name} {settled.outcome} on attempt {settled.attempt} ({settled.code})")


# -- the jobs -------------------------------------------------------------------------------------


@job(
    input=OrderRef,
    idempotency_key=lambda i: f"fulfil:{i.org_id}:{i.number}",
    tenant=lambda i: i.org_id,
    retry={"attempts": 3, "backoff": "exponential", "delay": "1s"},
    queue="orders",
    on_settled=record_fulfilment,
)
def fulfil_order(run: JobRun[OrderRef]) -> dict[str, Any]:
    """Charge the card, email the receipt, and ask for a review three days later."""
    shop: ShopServices = run.ctx
    order = _order(run.input)

    def charge() -> dict[str, Any]:  # the gateway: outside the database, so a plain step (keyed by the order)
        charge_id = shop.gateway.charge(order_number=order.number, amount_cents=order.total_cents)
        Order.objects.filter(pk=order.pk).update(charges=F("charges") + 1)  # counts the gateway's charges
        return {"charge_id": charge_id, "amount_cents": order.total_cents}

    def mark_paid() -> None:
        Order.objects.filter(pk=order.pk).update(charged=True, status=Order.Status.PAID)

    def email(subject: str) -> str:
        message_id = shop.mailer.send(to=_customer(order), subject=subject)
        Order.objects.filter(pk=order.pk).update(emailed=F("emailed") + 1)
        return message_id

    charged = run.step.run("charge", charge)  # attempt 2 reads this back; the gateway is not called
    database_step(run, "mark-paid", mark_paid)  # the order's new status commits with this step's checkpoint
    run.step.run("email-receipt", lambda: email(f"Receipt for order {order.number}"))
    run.step.sleep("3d")  # the run suspends; the queue hands it back in three days
    run.step.run("nudge", lambda: email(f"How was order {order.number}?"))
    return {"charge_id": charged["charge_id"]}


@job(
    input=OrderRef,
    idempotency_key=lambda i: f"ship:{i.org_id}:{i.number}",
    tenant=lambda i: i.org_id,
    retry={"attempts": 5, "backoff": "linear", "delay": "30s"},
    queue="orders",
)
def book_shipment(run: JobRun[OrderRef]) -> dict[str, Any]:
    """Book a shipping label with the carrier (whose API times out now and then)."""
    shop: ShopServices = run.ctx
    label = run.step.run("book-label", lambda: shop.carrier.book_label(order_number=run.input.number))
    return {"label": label}


@job(
    input=InventorySync,
    idempotency_key=lambda i: f"inventory:{i.org_id}:{i.warehouse}",
    tenant=lambda i: i.org_id,
    retry={"attempts": 3, "backoff": "exponential", "delay": "1m", "max_delay": "10m"},
    on_settled=page_on_failure,
)
def sync_inventory(run: JobRun[InventorySync]) -> dict[str, Any]:
    """Pull stock levels from one warehouse."""
    shop: ShopServices = run.ctx
    levels = run.step.run("fetch-levels", lambda: shop.warehouse.stock_levels(run.input.warehouse))
    return {"skus": len(levels)}


@job(
    input=RefundRequest,
    idempotency_key=lambda i: f"refund:{i.org_id}:{i.number}",
    tenant=lambda i: i.org_id,
    retry={"attempts": 5},
    queue="payments",
    priority=10,
    on_settled=page_on_failure,
)
def issue_refund(run: JobRun[RefundRequest]) -> dict[str, Any]:
    """Refund an order through the gateway."""
    shop: ShopServices = run.ctx
    order = _order(run.input)
    refund_id = run.step.run(
        "refund", lambda: shop.gateway.refund(order_number=order.number, amount_cents=order.total_cents)
    )
    return {"refund_id": refund_id}


def _orders_by_org() -> dict[str, int]:
    rows = Order.objects.values("org_id").annotate(orders=Count("id")).order_by("org_id")
    return {row["org_id"]: row["orders"] for row in rows}


@job(
    input=SalesReportInput,
    idempotency_key=lambda i: f"sales-report:{i.day.isoformat()}",
    tenant="none",
    queue="reports",
)
def daily_sales_report(run: JobRun[SalesReportInput]) -> dict[str, Any]:
    """Count the day's orders across every org. The job belongs to no tenant, so its tenant-scoped read
    says why it spans them; without ``cross_tenant`` it would be ``X_TENANCY_ACTOR_ORG_REQUIRED``."""
    by_org = run.step.run(
        "count-orders", lambda: cross_tenant("the daily sales report totals every org", _orders_by_org)
    )
    return {"day": run.input.day.isoformat(), "orders": sum(by_org.values()), "orgs": len(by_org), "by_org": by_org}


class PayoutBatch(BaseModel):
    """A day's seller payouts for one org."""

    org_id: str
    batch: str


@job(
    input=PayoutBatch,
    idempotency_key=lambda i: f"payouts:{i.org_id}:{i.batch}",
    tenant=lambda i: i.org_id,
    retry={"attempts": 1},
    timeout="30s",
    on_settled=page_on_failure,
)
def settle_payouts(run: JobRun[PayoutBatch]) -> str:
    """Settle a payout batch at the bank. The bank hangs; the job's 30s ``timeout`` aborts ``run.signal``,
    which the call was handed, so the body stops at the deadline instead of holding a worker slot."""
    shop: ShopServices = run.ctx
    return shop.bank.settle(run.input.batch, run.signal)


class AccountSync(BaseModel):
    """One sync request for one ledger account."""

    org_id: str
    account_id: str
    request_id: str


@job(
    input=AccountSync,
    idempotency_key=lambda i: f"sync-account:{i.request_id}",
    tenant=lambda i: i.org_id,
    retry={"attempts": 3},
    concurrency=Concurrency(key=lambda i: i.account_id, limit=1, when_busy="fail"),
    on_settled=page_on_failure,
)
def sync_account(run: JobRun[AccountSync]) -> dict[str, Any]:
    """Sync one ledger account — at most one run per account fleet-wide; a second request for an
    account already syncing is refused (``X_JOB_KEY_BUSY``) rather than queued behind it."""
    shop: ShopServices = run.ctx
    return {"account": run.input.account_id, "sync": shop.ledger.sync(run.input.account_id)}


# -- the checkout's confirmation, through the transactional outbox ------------------------------------


@job(
    input=OrderRef,
    idempotency_key=lambda i: f"confirm:{i.org_id}:{i.number}",
    tenant=lambda i: i.org_id,
    retry={"attempts": 3},
    queue="checkout",
)
def confirm_order(run: JobRun[OrderRef]) -> dict[str, Any]:
    """Email the order confirmation. The checkout enqueues it inside its own ``transaction.atomic()``, next
    to the Order row, with the outbox installed: the job exists exactly when the order commits — a checkout
    that rolls back leaves no job, and a commit can never lose one."""
    shop: ShopServices = run.ctx
    order = _order(run.input)

    def email() -> str:
        message_id = shop.mailer.send(to=_customer(order), subject=f"Order {order.number} confirmed")
        Order.objects.filter(pk=order.pk).update(emailed=F("emailed") + 1)
        return message_id

    return {"message_id": run.step.run("email-confirmation", email)}


# -- waiting on an event (appended with the scheduler demo) ---------------------------------------


class TransferAwaited(OrderRef):
    """An order paid by bank transfer: the bank reports the money later."""


@job(
    input=TransferAwaited,
    idempotency_key=lambda i: f"await-transfer:{i.org_id}:{i.number}",
    tenant=lambda i: i.org_id,
    retry={"attempts": 3},
    queue="payments",
    event_poll="1m",
)
def await_bank_transfer(run: JobRun[TransferAwaited]) -> dict[str, Any]:
    """Wait — up to three days, holding no process — for the bank to report the customer's transfer,
    then mark the order paid. ``publish_event("bank.transfer.received", {...})`` from any process resumes
    it on its next poll; no answer in three days is ``X_JOB_TIMEOUT``."""
    transfer = run.step.wait_for_event(
        "bank-transfer",
        "bank.transfer.received",
        match={"org_id": run.input.org_id, "order": run.input.number},
        timeout="3d",
        required=True,
    )

    def mark_paid() -> str:
        Order.objects.filter(org_id=run.input.org_id, number=run.input.number).update(status=Order.Status.PAID)
        return str(transfer["reference"])

    reference = database_step(run, "mark-paid", mark_paid)
    return {"reference": reference, "amount_cents": transfer["amount_cents"]}


def database_step(run: JobRun[Any], name: str, write: Callable[[], T]) -> T:
    """``write`` (an update of the shop's own rows) as a transactional step: the rows and the step's
    checkpoint commit together, so a worker killed in between leaves neither and the write lands once.
    The Redis driver keeps its jobs outside the database, where no transaction reaches them: there the
    write runs as a plain step (the demo's writes are idempotent — the same status again)."""
    if job_driver().alias is not None:
        return run.step.atomic(name, write)
    return run.step.run(name, write)


# -- maintenance: a backfill over the orders ---------------------------------------------------------


def _settle_charged(rows: list[Order], signal: Any) -> None:
    """Orders the gateway charged that never left ``placed`` (an old bug, say): mark them ``paid``.
    Idempotent: a page handled twice writes the same status."""
    for order in rows:
        order.status = Order.Status.PAID
    Order.objects.bulk_update(rows, ["status"])


settle_charged_orders = backfill(
    name="shop.settle-charged-orders",
    tenant="none",  # one pass over every org's orders
    batch=2,
    rate=50,
    source=lambda ctx: Order.objects.filter(charged=True, status=Order.Status.PLACED),
    handle=_settle_charged,
    count=lambda ctx: Order.objects.filter(charged=True, status=Order.Status.PLACED).count(),
)


# -- outbound: an export of the orders and an orders.paid webhook (demo_project/shop/outbound.py) ------

from .outbound import export_orders, order_paid  # noqa: E402, F401 — declared with the shop's other jobs

# -- the payment provider's rate limit, on a fair queue (appended with the limits demo) -------------

PAYMENT_GATEWAY = RateLimit("payment-gateway", "5/s")
"""The payment provider's API contract: at most 5 calls a second per org, however many workers run."""


@job(
    input=OrderRef,
    idempotency_key=lambda i: f"reconcile:{i.org_id}:{i.number}",
    tenant=lambda i: i.org_id,
    queue="payments",
    rate_limit=PAYMENT_GATEWAY,
    rate_key=lambda i: i.org_id,
)
def reconcile_payment(run: JobRun[OrderRef]) -> dict[str, Any]:
    """Ask the gateway what it captured for one order (one API call); answers when the call was made."""
    shop: ShopServices = run.ctx
    captured = shop.gateway.captures_of(order_number=run.input.number)
    return {"called_at_ms": job_clock().now_ms(), "captures": captured}
