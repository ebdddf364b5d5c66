"""The ready-made webhook ledger's two tables (``django_webhook_ledger()``): every delivery attempt with its
status or failure code and the endpoint's consecutive-failure count after it, and each endpoint's state
(disabled or not). Read-only like every other page: rows are written by deliveries; an endpoint is
re-enabled by the app (``ledger.enable(endpoint_id)``)."""

from __future__ import annotations

from django.contrib import admin

from ..errors import JobArgumentInvalidError
from ..models import WebhookDelivery, WebhookEndpointState
from ..operator.arguments import shown
from ._support import ReadOnlyAdmin


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """Newest first; filter by endpoint with ``?endpoint_id=…`` (indexed)."""

    list_display = (
        "created_at",
        "endpoint_id",
        "event_id",
        "topic",
        "attempt",
        "status_code",
        "ok",
        "error_code",
        "consecutive_failures",
        "duration_ms",
    )
    list_filter = ("ok",)
    search_fields = ("=endpoint_id", "=event_id")
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    list_per_page = 100

    def check_key(self, object_id: str) -> str:
        if not (object_id.isascii() and object_id.isdigit() and len(object_id) <= 18):
            raise JobArgumentInvalidError(
                f"{shown(object_id)} is not a webhook delivery id (a whole number)", {"field": "id"}
            )
        return object_id


@admin.register(WebhookEndpointState)
class WebhookEndpointStateAdmin(ReadOnlyAdmin):
    """Every endpoint the ledger knows: consecutive failures, and when and why it was disabled."""

    list_display = ("endpoint_id", "consecutive_failures", "disabled_at", "disabled_reason", "updated_at")
    search_fields = ("=endpoint_id",)
    ordering = ("endpoint_id",)
    show_full_result_count = False
