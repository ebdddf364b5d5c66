"""The export and the webhook the outbound process tests run in real worker processes
(``ULTIMATE_JOBS['MODULES']`` of :mod:`tests.e2e.outbound_settings`).

``e2e-export-posts`` writes every ``tests.secapp.Post`` row to ``UJ_EXPORT_DIR`` in pages of ``BATCH``;
``e2e-deliver`` POSTs one event to the receiver at ``UJ_WEBHOOK_URL`` and records into the Django-model
ledger, so the parent reads both from the database and the folder."""

from __future__ import annotations

import os
from typing import Any

from django.core.files.storage import FileSystemStorage

from tests.secapp.models import Post
from ultimate_jobs import django_webhook_ledger, export_rows, webhook
from ultimate_jobs.webhooks import WebhookEndpoint, WebhookEvent, WebhookInput

QUEUE = "e2e-pg"
BATCH = 1_000
SECRET = "whsec_e2e"


def all_posts(run: Any) -> Any:
    return Post.objects.all()


def post_row(post: Post) -> dict[str, Any]:
    return {"id": post.pk, "title": post.title}


export_posts = export_rows(
    name="e2e-export-posts",
    tenant="none",
    queue=QUEUE,
    prefix=lambda i: f"exports/{i['export_id']}",
    source=all_posts,
    columns=["id", "title"],
    row=post_row,
    sink=lambda: FileSystemStorage(location=os.environ["UJ_EXPORT_DIR"]),
    batch=BATCH,
    max_part_bytes=64 * 1024,
    rate=20,  # parts a second: the SIGKILL test stops A mid-export with 2 s of parts still ahead of it
    retry={"attempts": 3},
)


def endpoint(i: WebhookInput) -> WebhookEndpoint:
    return WebhookEndpoint(id=i.endpoint_id, url=os.environ["UJ_WEBHOOK_URL"], secret=SECRET)


def event(i: WebhookInput) -> WebhookEvent:
    return WebhookEvent(id=i.event_id, topic="orders.paid", body={"event": i.event_id})


deliver = webhook(
    name="e2e-deliver",
    tenant="none",
    queue=QUEUE,
    endpoint=endpoint,
    event=event,
    ledger=django_webhook_ledger(),
    retry={"attempts": 3},
)
