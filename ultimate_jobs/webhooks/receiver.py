"""The receiving half: check a delivery's signature before acting on it.

>>> @webhook_receiver(secret=lambda request: settings.PARTNER_WEBHOOK_SECRET)
... def orders_hook(request):
...     event = request.webhook            # a VerifiedWebhook: event_id, topic, timestamp, body
...     record(event.event_id, json.loads(event.body))
...     return HttpResponse(status=204)

The compare is constant-time (``hmac.compare_digest``); a timestamp outside ``tolerance`` seconds of
the receiver's clock (either way) is refused, and a delivery re-dated into the window no longer
matches its mac. Replays inside the window are the receiver's to dedupe — by ``event_id``.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import wraps
from typing import Any, Protocol

from ..errors import WebhookEventInvalidError, WebhookSignatureInvalidError
from ..guards.sync_only import refuse_async
from .signature import (
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TOPIC_HEADER,
    parse_signature,
    webhook_mac,
)

DEFAULT_TOLERANCE_S = 300


class _Request(Protocol):
    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def body(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class VerifiedWebhook:
    """A delivery whose signature verified: what a view may act on."""

    event_id: str
    topic: str
    timestamp: int
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


Secrets = str | bytes | Sequence[str | bytes]


def verify_webhook_signature(
    request: _Request,
    secret: Secrets,
    tolerance: int = DEFAULT_TOLERANCE_S,
    *,
    now: float | None = None,
) -> VerifiedWebhook:
    """Check ``request``'s ``x-ultimate-webhook-*`` headers against its body; answer the verified delivery
    or raise ``X_WEBHOOK_SIGNATURE_INVALID``.

    >>> verified = verify_webhook_signature(request, secret="whsec_…")
    >>> verified.event_id, verified.topic
    ('evt_01HZ', 'orders.paid')

    ``request`` is a Django ``HttpRequest`` or anything with ``headers`` (looked up by the lower-case
    names) and ``body`` bytes. ``secret`` may be a list (the old and the new one while rotating).
    ``now`` (seconds since the epoch) defaults to the system clock.
    """

    def refuse(why: str) -> WebhookSignatureInvalidError:
        return WebhookSignatureInvalidError(
            f"the webhook delivery does not verify: {why}; refuse it (answer 401) and do not act on it", {"why": why}
        )

    headers = request.headers
    event_id, topic = _header(headers, WEBHOOK_ID_HEADER), _header(headers, WEBHOOK_TOPIC_HEADER)
    signature = _header(headers, WEBHOOK_SIGNATURE_HEADER)
    if event_id is None or topic is None or signature is None:
        raise refuse("a x-ultimate-webhook-id, -topic or -signature header is missing")
    parsed = parse_signature(signature)
    if parsed is None:
        raise refuse("the signature header is not t=<seconds>,v1=<hex>")
    current = time.time() if now is None else now
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance < 1:
        raise refuse(f"tolerance must be whole seconds >= 1, got {tolerance!r}")
    if abs(current - parsed.timestamp) > tolerance:
        raise refuse(f"its timestamp is {int(current - parsed.timestamp)} s from now, outside {tolerance} s")
    body = bytes(request.body)
    secrets = [secret] if isinstance(secret, str | bytes) else list(secret)
    if not secrets or any(not isinstance(s, str | bytes) or not s for s in secrets):
        raise refuse("no secret to verify with")
    try:
        expected = [webhook_mac(s, parsed.timestamp, event_id, topic, body) for s in secrets]
    except WebhookEventInvalidError as exc:
        raise refuse("its id or topic cannot have been signed") from exc
    matched = False
    for mac in expected:
        for given in parsed.macs:
            # every pair is compared, in constant time each: no early exit tells which one was close
            matched |= hmac.compare_digest(mac.encode(), given.encode("ascii", "replace"))
    if not matched:
        raise refuse("the mac does not match the body, id, topic and timestamp under this secret")
    return VerifiedWebhook(event_id=event_id, topic=topic, timestamp=parsed.timestamp, body=body)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:  # a plain dict from a test or a non-Django server: try the usual capitalisations
        value = headers.get(name.title())
    return value if isinstance(value, str) else None


def webhook_receiver(
    *, secret: Secrets | Callable[[Any], Secrets], tolerance: int = DEFAULT_TOLERANCE_S
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a Django view: a delivery that does not verify is answered 401 (JSON ``{"code",
    "message"}``) before the view runs; one that does reaches it with ``request.webhook`` set to the
    :class:`VerifiedWebhook`. The view is CSRF-exempt (the signature is its authentication) and POST-only.

    >>> @webhook_receiver(secret=lambda request: Endpoint.objects.get(slug="shop").secret)
    ... def hook(request):
    ...     return HttpResponse(status=204)
    """

    refuse_async(secret, what="webhook_receiver(secret=...)")

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        from django.http import HttpResponseNotAllowed, JsonResponse

        refuse_async(view, what=f"@webhook_receiver over {getattr(view, '__qualname__', view)!r}: the view")
        from django.views.decorators.csrf import csrf_exempt

        @wraps(view)
        def wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
            if request.method != "POST":
                return HttpResponseNotAllowed(["POST"])
            secrets = secret(request) if callable(secret) else secret
            try:
                request.webhook = verify_webhook_signature(request, secrets, tolerance)
            except WebhookSignatureInvalidError as exc:
                return JsonResponse({"code": exc.code, "message": exc.message}, status=401)
            return view(request, *args, **kwargs)

        return csrf_exempt(wrapped)

    return decorate
