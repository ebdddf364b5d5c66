"""The demo's outbound part: org-acme's orders exported to a local folder, and an ``orders.paid`` webhook
delivered over real HTTP to this project's own receiver view, which verifies its signature.

The receiver is served for the part by a WSGI server on 127.0.0.1 (an ephemeral port) in a thread, and
routes to ``order_paid_hook`` — the view ``/hooks/orders/`` serves under ``runserver``. Jobs run in this
process on the demo's driver (``run_jobs``), on a frozen clock started at the real time: a webhook is
signed at its send time, and the receiver refuses a timestamp five minutes away from its own clock.
``run_outbound_part()`` answers printable lines.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
from django.core.handlers.wsgi import WSGIRequest
from django.db import close_old_connections

from ultimate_jobs import set_job_clock, set_job_driver
from ultimate_jobs.models import WebhookDelivery
from ultimate_jobs.testing import FrozenClock, run_jobs
from ultimate_jobs.webhooks import WEBHOOK_SIGNATURE_HEADER, WebhookEndpoint

from .backend import demo_driver
from .models import Order
from .outbound import ENDPOINTS, RECEIVED, export_dir, export_orders, order_paid, order_paid_hook, webhook_secret

ORG = "org-acme"
EXPORT_ID = "demo"
ENDPOINT_ID = "ep-acme-erp"
PART_ORDERS = [("3001", 12_500), ("3002", 990), ("3003", 30_000)]


def run_outbound_part() -> list[str]:
    """Export org-acme's orders, then deliver one order's ``orders.paid`` to the receiver view."""
    clock = FrozenClock(start_ms=int(time.time() * 1000))
    driver = demo_driver(clock)
    set_job_clock(clock)
    set_job_driver(driver)
    try:
        return [*_export(clock), "", *_webhook(clock)]
    finally:
        set_job_driver(None)
        set_job_clock(None)


def _export(clock: FrozenClock) -> list[str]:
    for number, cents in PART_ORDERS:
        Order.objects.update_or_create(org_id=ORG, number=number, defaults={"total_cents": cents})
    enqueued = export_orders.enqueue({"org_id": ORG, "export_id": EXPORT_ID})
    report = run_jobs(clock=clock)
    result = next((e.result for e in report.executions if e.job_id == enqueued.id), None)
    folder = export_dir() / ORG / EXPORT_ID
    lines = [f"export {export_orders.name}: {ORG}'s orders, 2 per page, one object per page"]
    if not isinstance(result, dict):
        return [*lines, f"  it did not complete: {report.outcomes}"]
    parts = sorted(p.name for p in folder.glob("part-*.csv"))
    lines.append(f"  {result['rows']} order(s) in {result['parts']} part(s) + manifest.json, in {folder}")
    lines.append(f"  files: {', '.join([*parts, 'manifest.json'])}")
    text = b"".join((folder / name).read_bytes() for name in parts).decode()
    lines.append("  cat part-*.csv (the header is in part 0 only, so the parts make one file):")
    lines += [f"    {line}" for line in text.splitlines()]
    return lines


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _receiver_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    """The receiver view behind a WSGI server (only its route: the part does not need the whole site)."""
    close_old_connections()
    response = order_paid_hook(WSGIRequest(environ))
    start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
    return [response.content]


@contextmanager
def _serving() -> Iterator[str]:
    server: WSGIServer = make_server("127.0.0.1", 0, _receiver_app, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks/orders/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _webhook(clock: FrozenClock) -> list[str]:
    order = Order.objects.get(org_id=ORG, number=PART_ORDERS[0][0])
    event_id = f"evt_order_{order.pk}"
    RECEIVED.clear()
    WebhookDelivery.objects.filter(endpoint_id=ENDPOINT_ID).delete()  # the demo database outlives a run
    with _serving() as url:
        ENDPOINTS[ENDPOINT_ID] = WebhookEndpoint(id=ENDPOINT_ID, url=url, secret=webhook_secret())
        enqueued = order_paid.enqueue({"endpoint_id": ENDPOINT_ID, "event_id": event_id, "org_id": ORG})
        report = run_jobs(clock=clock)
        execution = next((e for e in report.executions if e.job_id == enqueued.id), None)
        forged = _forged_copy(url, event_id)
    lines = [f"webhook {order_paid.name}: orders.paid for order {order.number} to this demo's own receiver view"]
    lines.append(f"  POST {url} -> {execution.result if execution else 'not run'}")
    for got in RECEIVED:
        lines.append(
            f"  the view verified the signature (x-ultimate-webhook-signature t={got.timestamp},v1=…): "
            f"event {got.event_id}, topic {got.topic}, body {got.body.decode()}"
        )
    for row in WebhookDelivery.objects.filter(endpoint_id=ENDPOINT_ID).order_by("id"):
        lines.append(
            f"  ledger (x_webhook_deliveries, admin: Webhook deliveries): attempt {row.attempt}, status "
            f"{row.status_code}, ok={row.ok}, consecutive failures {row.consecutive_failures}"
        )
    lines.append(f"  the same delivery with its body changed: {forged}")
    return lines


def _forged_copy(url: str, event_id: str) -> str:
    """Replay the signed headers over another body: the view answers 401 without running."""
    from ultimate_jobs.webhooks import WEBHOOK_ID_HEADER, WEBHOOK_TOPIC_HEADER, webhook_signature

    stamp = int(time.time())
    headers = {
        WEBHOOK_ID_HEADER: event_id,
        WEBHOOK_TOPIC_HEADER: "orders.paid",
        WEBHOOK_SIGNATURE_HEADER: webhook_signature(webhook_secret(), stamp, event_id, "orders.paid", b'{"total":1}'),
    }
    response = httpx.post(url, content=b'{"total":100000}', headers=headers)
    return f"{response.status_code} {response.json()['code']}"
