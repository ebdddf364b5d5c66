"""Outbound webhooks: :func:`webhook` (the sender, a factory over ``job()``), the ledgers, and the receiver's
:func:`verify_webhook_signature` — both halves over one signature module (:mod:`.signature`).

The sender needs httpx (``pip install 'ultimate_jobs[webhooks]'``), imported only when a delivery runs; the
receiver and the signature module need nothing beyond Django.
"""

from ..errors import (
    WebhookDeliveryFailedError,
    WebhookDeliveryRejectedError,
    WebhookDeliveryThrottledError,
    WebhookEndpointDisabledError,
    WebhookEndpointInvalidError,
    WebhookEndpointUnknownError,
    WebhookEventInvalidError,
    WebhookEventUnknownError,
    WebhookSignatureInvalidError,
)
from .deliver import (
    WebhookEndpoint,
    WebhookEvent,
    WebhookInput,
    retry_after_seconds,
    webhook,
)
from .ledger import (
    DjangoWebhookLedger,
    MemoryWebhookLedger,
    WebhookAttempt,
    WebhookLedger,
    django_webhook_ledger,
    memory_webhook_ledger,
)
from .receiver import VerifiedWebhook, verify_webhook_signature, webhook_receiver
from .signature import (
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TOPIC_HEADER,
    signed_content,
    webhook_signature,
)

__all__ = [
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TOPIC_HEADER",
    "DjangoWebhookLedger",
    "MemoryWebhookLedger",
    "VerifiedWebhook",
    "WebhookAttempt",
    "WebhookDeliveryFailedError",
    "WebhookDeliveryRejectedError",
    "WebhookDeliveryThrottledError",
    "WebhookEndpoint",
    "WebhookEndpointDisabledError",
    "WebhookEndpointInvalidError",
    "WebhookEndpointUnknownError",
    "WebhookEvent",
    "WebhookEventInvalidError",
    "WebhookEventUnknownError",
    "WebhookInput",
    "WebhookLedger",
    "WebhookSignatureInvalidError",
    "django_webhook_ledger",
    "memory_webhook_ledger",
    "retry_after_seconds",
    "signed_content",
    "verify_webhook_signature",
    "webhook",
    "webhook_receiver",
    "webhook_signature",
]
