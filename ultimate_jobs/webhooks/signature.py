"""The webhook signature format, in one module both halves import: the sender (:func:`~ultimate_jobs.webhook`)
signs with it and the receiver (:func:`~ultimate_jobs.webhooks.verify_webhook_signature`) checks with it.
Nothing else re-declares the header names or the canonical string.

A delivery carries three headers beyond ``content-type``::

    x-ultimate-webhook-id:        evt_01HZ
    x-ultimate-webhook-topic:     orders.paid
    x-ultimate-webhook-signature: t=1700000000,v1=<hex hmac-sha256>

The mac is HMAC-SHA256 with the endpoint's secret over ``v1:<t>:<event id>:<topic>:<body>``:

- the timestamp ``t`` (whole seconds, the SEND time) is inside the mac, so a captured delivery
  re-dated into a receiver's freshness window no longer verifies;
- ``:`` is refused in an event id and a topic, so one mac can never authenticate two id/topic splits.

This module imports neither Django nor an HTTP client.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from ..errors import WebhookEventInvalidError

WEBHOOK_ID_HEADER = "x-ultimate-webhook-id"
WEBHOOK_TOPIC_HEADER = "x-ultimate-webhook-topic"
WEBHOOK_SIGNATURE_HEADER = "x-ultimate-webhook-signature"
WEBHOOK_SIGNATURE_VERSION = "v1"
MAX_LABEL_LENGTH = 200


def check_label(value: object, what: str) -> str:
    """``value`` when it can stand in the canonical string: a non-empty string of at most 200 characters
    with no ``:`` and no control character; else ``X_WEBHOOK_EVENT_INVALID``."""
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_LABEL_LENGTH
        or ":" in value
        or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)
    ):
        shown = repr(value)[:60]
        raise WebhookEventInvalidError(
            f"the webhook's {what} {shown} cannot be signed: it must be a non-empty string of at most "
            f"{MAX_LABEL_LENGTH} characters with no ':' (one mac would otherwise authenticate two "
            "id/topic splits) and no control character",
            {"field": what},
        )
    return value


def signed_content(timestamp: int, event_id: str, topic: str, body: bytes) -> bytes:
    """The canonical bytes the mac covers: ``v1:<timestamp>:<event id>:<topic>:<body>``.

    >>> signed_content(1700000000, "evt_1", "orders.paid", b'{"id": 1}')
    b'v1:1700000000:evt_1:orders.paid:{"id": 1}'
    """
    check_label(event_id, "event id")
    check_label(topic, "topic")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise WebhookEventInvalidError(f"the signature timestamp must be whole seconds >= 0, got {timestamp!r}", {})
    head = f"{WEBHOOK_SIGNATURE_VERSION}:{timestamp}:{event_id}:{topic}:".encode()
    return head + bytes(body)


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def webhook_mac(secret: str | bytes, timestamp: int, event_id: str, topic: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of :func:`signed_content` under ``secret``."""
    return hmac.new(_key(secret), signed_content(timestamp, event_id, topic, body), hashlib.sha256).hexdigest()


def webhook_signature(secret: str | bytes, timestamp: int, event_id: str, topic: str, body: bytes) -> str:
    """The ``x-ultimate-webhook-signature`` value: ``t=<timestamp>,v1=<hex mac>``.

    >>> webhook_signature("whsec", 1700000000, "evt_1", "orders.paid", b"{}")  # doctest: +ELLIPSIS
    't=1700000000,v1=...'
    """
    return f"t={timestamp},{WEBHOOK_SIGNATURE_VERSION}={webhook_mac(secret, timestamp, event_id, topic, body)}"


@dataclass(frozen=True, slots=True)
class ParsedSignature:
    """A signature header taken apart: its timestamp and every ``v1`` mac it carries (a sender rotating
    its secret may send two)."""

    timestamp: int
    macs: tuple[str, ...]


def parse_signature(header: str) -> ParsedSignature | None:
    """``t=…,v1=…[,v1=…]`` taken apart, or ``None`` when the header has no whole-seconds ``t`` or no ``v1``."""
    timestamp: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        if key == "t" and value.isascii() and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif key == WEBHOOK_SIGNATURE_VERSION and value:
            macs.append(value)
    if timestamp is None or not macs:
        return None
    return ParsedSignature(timestamp, tuple(macs))
