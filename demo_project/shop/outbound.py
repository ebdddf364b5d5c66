"""The shop's outbound work: an export of one org's orders to a folder, and an ``orders.paid`` webhook to
a partner — with the receiving view that checks its signature.

- ``export_orders``: ``export_rows()`` over ``Order``, two orders per page, into ``SHOP_EXPORT_DIR``
  (a ``FileSystemStorage``; any django-storages backend works the same) under
  ``<org>/<export id>/part-00000.csv`` … plus ``manifest.json``.
- ``order_paid``: ``webhook()`` delivering one order's ``orders.paid`` event to one endpoint, recorded in
  the Django-model ledger (the admin's "Webhook deliveries"), disabled after 5 failures in a row.
- ``order_paid_hook``: the receiver (``/hooks/orders/`` in demo_project/urls.py), a view behind
  ``webhook_receiver``: a delivery whose signature does not verify is answered 401 before it runs.

Which endpoints exist is the app's: here ``ENDPOINTS``, filled by the demo; a real shop keeps a table.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.storage import FileSystemStorage
from django.http import HttpRequest, HttpResponse
from pydantic import BaseModel, Field

from ultimate_jobs import django_webhook_ledger, export_rows, webhook, webhook_receiver
from ultimate_jobs.webhooks import VerifiedWebhook, WebhookEndpoint, WebhookEvent, WebhookInput

from .models import Order

DEFAULT_WEBHOOK_SECRET = "demo-webhook-secret"


def export_dir() -> Path:
    """Where exports go: ``settings.SHOP_EXPORT_DIR`` (the demo's ``var/exports``), else a temp folder."""
    configured = getattr(settings, "SHOP_EXPORT_DIR", None)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "ultimate_jobs_demo_exports"


def webhook_secret() -> str:
    return str(getattr(settings, "SHOP_WEBHOOK_SECRET", DEFAULT_WEBHOOK_SECRET))


class OrdersExport(BaseModel):
    """One export of one org's orders."""

    org_id: str = Field(min_length=1)
    export_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")


def order_row(order: Order) -> dict[str, Any]:
    return {
        "number": order.number,
        "status": order.status,
        "total": f"{order.total_cents / 100:.2f}",
        "charged": order.charged,
    }


export_orders = export_rows(
    name="shop.export-orders",
    input=OrdersExport,
    tenant=lambda i: i.org_id,  # the export reads one org's rows, under that org's guard
    prefix=lambda i: f"{i.org_id}/{i.export_id}",
    source=lambda run: Order.objects.filter(org_id=run.input.org_id),
    columns=["number", "status", "total", "charged"],
    row=order_row,
    sink=lambda: FileSystemStorage(location=str(export_dir())),  # read when a part is written, never at import
    batch=2,
)

ENDPOINTS: dict[str, WebhookEndpoint] = {}
"""The demo's subscription table: endpoint id -> where and with which secret."""


def endpoint(i: WebhookInput) -> WebhookEndpoint | None:
    return ENDPOINTS.get(i.endpoint_id)


def order_event(i: WebhookInput) -> WebhookEvent | None:
    """``evt_order_<pk>``: the ``orders.paid`` event of that order (read under the delivery's org)."""
    pk = i.event_id.removeprefix("evt_order_")
    order = Order.objects.filter(pk=int(pk)).first() if pk.isdigit() else None
    if order is None:
        return None
    body = {"org_id": order.org_id, "number": order.number, "total_cents": order.total_cents}
    return WebhookEvent(id=i.event_id, topic="orders.paid", body=body)


order_paid = webhook(
    name="shop.order-paid",
    tenant=lambda i: i.org_id,
    endpoint=endpoint,
    event=order_event,
    ledger=django_webhook_ledger(),
    disable_after=5,
    timeout="10s",
)

RECEIVED: list[VerifiedWebhook] = []
"""What the receiver view accepted (the demo prints it)."""


@webhook_receiver(secret=lambda request: webhook_secret())
def order_paid_hook(request: HttpRequest) -> HttpResponse:
    """A partner's end of ``order_paid``: reached only by a delivery whose signature verified."""
    RECEIVED.append(request.webhook)  # type: ignore[attr-defined]
    return HttpResponse(status=204)
