"""``webhook()``: one event delivered to one endpoint, signed, retried and recorded — declared as a job.

Retry with backoff, disable-after-N and the ledger are per-endpoint facts, so the endpoint is the unit:
the fan-out is the app's own loop over its own subscription table, one enqueue per endpoint.

One attempt, in order:

1. the payload's org is the run's org (``X_JOB_TENANT_MISMATCH`` before anything is read);
2. ``endpoint(input)`` and ``event(input)`` are read — every attempt, never checkpointed (the endpoint
   carries the secret, and a step's output is stored);
3. the endpoint's own ``disabled`` and ``ledger.is_disabled(endpoint id)`` are asked before every socket;
4. one POST with httpx, redirects never followed, signed at send time
   (:mod:`ultimate_jobs.webhooks.signature`), the endpoint's headers merged UNDER the framework's;
5. the attempt is recorded in the ledger BEFORE the delivery raises; ``disable_after`` consecutive
   failures disable the endpoint in the ledger.

The deadline (``timeout``), a lost lease and an operator cancel tear the request down and write no
ledger row: the job is handed on at once, and a request left open would be a duplicate delivery. The
worker's drain never tears down a POST already on the wire (it stops one not yet sent): the POST
finishes and is recorded like any other outcome.
"""

from __future__ import annotations

import contextlib
import email.utils
import importlib.util
import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import pydantic

from ..core.clock import Clock, Timer
from ..core.declare import job
from ..core.definition import JobHandle
from ..core.durations import Duration
from ..core.factories import factory_body
from ..core.installed import job_clock
from ..core.logs import log_event
from ..core.retry import RetryPolicy, parse_optional_duration
from ..core.run import JobRun
from ..errors import (
    CodedError,
    JobDeclarationInvalidError,
    JobTenantMismatchError,
    JobTimeoutError,
    UltimateError,
    WebhookDeliveryFailedError,
    WebhookDeliveryRejectedError,
    WebhookDeliveryThrottledError,
    WebhookEndpointDisabledError,
    WebhookEndpointInvalidError,
    WebhookEndpointUnknownError,
    WebhookEventInvalidError,
    WebhookEventUnknownError,
)
from ..features.user_calls import accept_async
from ..guards.sync_only import refuse_async
from .ledger import WebhookAttempt, WebhookLedger
from .signature import (
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TOPIC_HEADER,
    check_label,
    webhook_signature,
)

logger = logging.getLogger("ultimate_jobs")

USER_AGENT = "ultimate-jobs-webhook/1"
ERROR_TEXT_BYTES = 2_048
TRANSPORT_SLACK_S = 5.0  # httpx's own timeouts sit past the attempt's deadline: the deadline tears down first
_DROPPED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class WebhookInput(pydantic.BaseModel):
    """A delivery's input: which endpoint, which event, and — for an org-owned endpoint — the org, which
    ``tenant=lambda i: i.org_id`` reads."""

    model_config = pydantic.ConfigDict(extra="forbid")

    endpoint_id: str = pydantic.Field(min_length=1, max_length=200)
    event_id: str = pydantic.Field(min_length=1, max_length=200)
    org_id: str | None = pydantic.Field(default=None, min_length=1, max_length=200)


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """Where a delivery goes: ``endpoint(input)`` may answer this, a dict with these keys, or any object
    with these attributes (a model row). ``headers`` are sent under the framework's own."""

    id: str
    url: str
    secret: str | bytes = field(repr=False)
    headers: Mapping[str, str] = field(default_factory=dict)
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """What is delivered: ``event(input)`` may answer this, a dict with these keys, or any object with
    them. A ``body`` that is not ``bytes``/``str`` is sent as compact JSON. A record with no ``id`` (the
    spec's ``{topic, body}``) is sent and signed under the ``event_id`` the delivery was enqueued with."""

    id: str
    topic: str
    body: Any
    content_type: str = "application/json"


def webhook(
    *,
    name: str,
    tenant: Literal["none"] | Callable[[WebhookInput], str | None],
    endpoint: Callable[[WebhookInput], Any],
    event: Callable[[WebhookInput], Any],
    ledger: WebhookLedger,
    disable_after: int | None = None,
    timeout: Duration | None = None,
    retry: RetryPolicy | dict[str, Any] | None = None,
    queue: str = "default",
    priority: int = 0,
) -> JobHandle[WebhookInput, dict[str, Any]]:
    """Declare a webhook delivery: each enqueue POSTs one event to one endpoint.

    >>> deliver = webhook(
    ...     name="partner.webhooks",
    ...     tenant=lambda i: i.org_id,
    ...     endpoint=lambda i: Endpoint.objects.filter(pk=i.endpoint_id).first(),
    ...     event=lambda i: Event.objects.filter(pk=i.event_id).first(),
    ...     ledger=django_webhook_ledger(),
    ...     disable_after=10,
    ...     timeout="10s",
    ... )
    >>> for sub in Subscription.objects.filter(topic="orders.paid"):
    ...     deliver.enqueue({"endpoint_id": str(sub.endpoint_id), "event_id": event_id, "org_id": sub.org_id})

    ``endpoint`` and ``event`` may be ``async def`` (``await Endpoint.objects.filter(...).afirst()``): each
    is run to completion in the delivery's attempt, before the POST (the ledger's methods stay plain defs).
    A 2xx completes the job. 429/503 is ``X_WEBHOOK_DELIVERY_THROTTLED``, retried after the receiver's
    ``Retry-After`` (clamped by the retry policy's ``max_delay``); another 4xx is
    ``X_WEBHOOK_DELIVERY_REJECTED`` (dead-lettered); a 3xx, 408, 5xx or a transport failure is
    ``X_WEBHOOK_DELIVERY_FAILED`` (retried with backoff). ``timeout`` bounds the whole attempt and
    should sit below the worker's drain deadline. Needs httpx: ``pip install ultimate_jobs[webhooks]``.
    """

    def bad(field_name: str, why: str) -> JobDeclarationInvalidError:
        return JobDeclarationInvalidError(f"webhook {name!r}: {field_name} {why}", {"job": name, "field": field_name})

    if not isinstance(name, str) or not name.strip():
        raise JobDeclarationInvalidError(f"webhook(): name must be a non-empty string, got {name!r}", {"field": "name"})
    if importlib.util.find_spec("httpx") is None:
        raise bad("httpx", "is not installed; install the extra: pip install 'ultimate_jobs[webhooks]'")
    for field_name, fn in (("endpoint", endpoint), ("event", event)):
        if not callable(fn):
            raise bad(field_name, "must be a function of the input answering the record or None")
    for method in ("record", "is_disabled", "disable"):
        if not callable(getattr(ledger, method, None)):
            raise bad("ledger", f"has no {method}(); pass memory_webhook_ledger(), django_webhook_ledger() or your own")
        refuse_async(getattr(ledger, method), what=f"webhook {name!r}: ledger.{method}", meta={"job": name})
    if disable_after is not None and (
        isinstance(disable_after, bool) or not isinstance(disable_after, int) or disable_after < 1
    ):
        raise bad("disable_after", f"must be a whole number of failures in a row >= 1 (or None), got {disable_after!r}")
    timeout_ms = parse_optional_duration(timeout, field="timeout", job=name)
    read_endpoint, read_event = (
        accept_async(fn, what=f"webhook {name!r}: {field_name}", meta={"job": name, "field": field_name})
        for field_name, fn in (("endpoint", endpoint), ("event", event))
    )
    declaration = _Declaration(name, read_endpoint, read_event, ledger, disable_after, timeout_ms)

    def body(run: JobRun[WebhookInput]) -> dict[str, Any]:
        return _Delivery(declaration, run).deliver()

    factory_body(body, "webhook", name)
    return job(
        name=name,
        idempotency_key=lambda i: f"{name}:{i.endpoint_id}:{i.event_id}",
        tenant=tenant,
        input=WebhookInput,
        queue=queue,
        priority=priority,
        retry=retry,
        timeout=timeout,
    )(body)


@dataclass(frozen=True, slots=True)
class _Declaration:
    name: str
    endpoint: Callable[[WebhookInput], Any]
    event: Callable[[WebhookInput], Any]
    ledger: WebhookLedger
    disable_after: int | None
    timeout_ms: int | None


class _Wire:
    """The socket of the one request in flight, and the cut that tears it down from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self.cut_by: UltimateError | None = None

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpx's trace hook: keep the socket the connection opened (cut it at once when already cut)."""
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._lock:
            self._socket = sock
            cut = self.cut_by is not None
        if cut:
            _shutdown(sock)

    def cut(self, reason: UltimateError) -> None:
        with self._lock:
            if self.cut_by is None:
                self.cut_by = reason
            sock = self._socket
        _shutdown(sock)


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    with contextlib.suppress(OSError):  # already closed by the other side
        sock.shutdown(socket.SHUT_RDWR)


@dataclass(frozen=True, slots=True)
class _Endpoint:
    id: str
    url: str
    secret: bytes
    headers: dict[str, str]
    disabled: bool


@dataclass(frozen=True, slots=True)
class _Event:
    id: str
    topic: str
    body: bytes
    content_type: str


class _Delivery:
    def __init__(self, declaration: _Declaration, run: JobRun[WebhookInput]) -> None:
        self.d = declaration
        self.run = run
        self.clock: Clock = job_clock()
        self.started_ms = self.clock.now_ms()

    def deliver(self) -> dict[str, Any]:
        run, name = self.run, self.d.name
        org = run.input.org_id
        if org is not None and org != run.tenant_id:
            raise JobTenantMismatchError(
                f"{name}: the delivery's org_id differs from the org the run is under "
                f"({run.tenant_id if run.tenant_id is not None else 'no org: tenant=none'}); enqueue it with the "
                "org that owns the endpoint, and declare tenant=lambda i: i.org_id",
                {"job": name, "run_org": run.tenant_id},
            )
        endpoint = self._endpoint()
        event = self._event()
        if endpoint.disabled or self.d.ledger.is_disabled(endpoint.id):
            raise WebhookEndpointDisabledError(
                f"{name}: endpoint {endpoint.id} is disabled, so nothing was sent; re-enable it "
                "(ledger.enable(endpoint_id)) and requeue the dead deliveries: "
                f"python manage.py jobs list --state dead --name {name} --json",
                {"job": name, "endpoint": endpoint.id},
            )
        run.signal.throw_if_aborted()  # a drain, cancel or deadline before the socket: nothing is sent
        return self._post(endpoint, event)

    # -- reading the seams ---------------------------------------------------------------------------

    def _endpoint(self) -> _Endpoint:
        found = self.d.endpoint(self.run.input)
        if found is None:
            raise WebhookEndpointUnknownError(
                f"{self.d.name}: endpoint({self.run.input.endpoint_id!r}) answered None; no endpoint has that id",
                {"job": self.d.name, "endpoint": self.run.input.endpoint_id},
            )

        def invalid(why: str) -> WebhookEndpointInvalidError:
            return WebhookEndpointInvalidError(
                f"{self.d.name}: endpoint {self.run.input.endpoint_id!r} {why}",
                {"job": self.d.name, "endpoint": self.run.input.endpoint_id},
            )

        endpoint_id, url = _read(found, "id"), _read(found, "url")
        secret, headers, disabled = _read(found, "secret"), _read(found, "headers"), _read(found, "disabled")
        if endpoint_id is None or str(endpoint_id) == "":
            raise invalid("has no id")
        if not isinstance(url, str):
            raise invalid("has no url")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            # the URL itself is not quoted: a query string may carry a token
            raise invalid(f"has a {parts.scheme or 'relative'} URL; give an absolute http:// or https:// URL")
        if hasattr(secret, "get_secret_value"):
            secret = secret.get_secret_value()
        if isinstance(secret, str):
            secret = secret.encode()
        if not isinstance(secret, bytes) or not secret:
            raise invalid("has no secret to sign with")
        merged: dict[str, str] = {}
        if headers:
            if not isinstance(headers, Mapping):
                raise invalid("has headers that are not a mapping of names to values")
            for key, value in headers.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    raise invalid("has a header that is not text")
                if any(ch in key + value for ch in "\r\n\x00") or not key.strip():
                    raise invalid(f"has a header {key[:40]!r} with a line break, a NUL byte or no name")
                if key.lower() not in _DROPPED_HEADERS:
                    merged[key.lower()] = value
        return _Endpoint(str(endpoint_id), url, secret, merged, bool(disabled))

    def _event(self) -> _Event:
        found = self.d.event(self.run.input)
        if found is None:
            raise WebhookEventUnknownError(
                f"{self.d.name}: event({self.run.input.event_id!r}) answered None; no event has that id",
                {"job": self.d.name, "event": self.run.input.event_id},
            )
        event_id, topic = _read(found, "id"), _read(found, "topic")
        if event_id is None:  # the spec's shape, {topic, body}: the event is the one the delivery was enqueued for
            event_id = self.run.input.event_id
        check_label(str(event_id), "event id")
        check_label(topic, "topic")
        body = _read(found, "body")
        content_type = _read(found, "content_type") or "application/json"
        if isinstance(body, str):
            data = body.encode()
        elif isinstance(body, bytes | bytearray | memoryview):
            data = bytes(body)
        else:
            try:
                data = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            except (TypeError, ValueError) as exc:
                raise WebhookEventInvalidError(
                    f"{self.d.name}: event {event_id!r} has a body that is not bytes, text or JSON ({exc}); "
                    "answer the body you mean to send",
                    {"job": self.d.name, "event": str(event_id)},
                ) from exc
        return _Event(str(event_id), str(topic), data, str(content_type))

    # -- the request ---------------------------------------------------------------------------------

    def _post(self, endpoint: _Endpoint, event: _Event) -> dict[str, Any]:
        import httpx

        run = self.run
        wire = _Wire()

        def on_abort(reason: UltimateError) -> None:
            if reason.code != "X_DRAINING":  # the drain lets a POST on the wire finish
                wire.cut(reason)

        run.signal.add_callback(on_abort)
        deadline: Timer | None = None
        if self.d.timeout_ms is not None:
            timeout_ms = self.d.timeout_ms
            # the executor's deadline aborts the run's signal — unless a drain aborted it first, which the
            # wire ignores: so the attempt's deadline tears the request down here too
            deadline = self.clock.call_at(
                self.started_ms + timeout_ms,
                lambda: wire.cut(JobTimeoutError(f"{self.d.name}: the attempt passed its timeout of {timeout_ms} ms")),
            )
        transport_timeout = None if self.d.timeout_ms is None else self.d.timeout_ms / 1000 + TRANSPORT_SLACK_S
        sent_ms = self.clock.now_ms()
        timestamp = sent_ms // 1000  # SEND time: a retry days later signs again, now
        headers = {
            **endpoint.headers,  # the endpoint's headers go UNDER the framework's: none can set a signature
            "content-type": event.content_type,
            "user-agent": USER_AGENT,
            WEBHOOK_ID_HEADER: event.id,
            WEBHOOK_TOPIC_HEADER: event.topic,
            WEBHOOK_SIGNATURE_HEADER: webhook_signature(endpoint.secret, timestamp, event.id, event.topic, event.body),
        }
        status: int | None = None
        text = ""
        response_headers: Mapping[str, str] = {}
        failure: Exception | None = None
        try:
            with httpx.Client(follow_redirects=False, timeout=transport_timeout) as client:
                request = client.build_request(
                    "POST", endpoint.url, content=event.body, headers=headers, extensions={"trace": wire.trace}
                )
                response = client.send(request, stream=True)
                try:
                    status, response_headers = response.status_code, dict(response.headers)
                    text = _head(response)
                finally:
                    response.close()
        except httpx.HTTPError as exc:
            failure = exc
        finally:
            if deadline is not None:
                deadline.cancel()
        duration_ms = self.clock.now_ms() - sent_ms
        if status is None and wire.cut_by is not None:
            # torn down by the deadline, a lost lease or a cancel: no ledger row — the job is handed on at
            # once, and this abandoned attempt must not count toward disable_after
            run.signal.throw_if_aborted()
            raise wire.cut_by from failure
        error = self._verdict(endpoint, status, text, response_headers, failure)
        attempt = WebhookAttempt(
            endpoint_id=endpoint.id,
            event_id=event.id,
            topic=event.topic,
            tenant_id=run.tenant_id,
            job_id=run.job_id,
            run_id=run.run_id,
            attempt=run.attempt,
            url=endpoint.url,
            status=status,
            ok=error is None,
            code=error.code if error is not None else None,
            error=error.message[:500] if error is not None else None,
            duration_ms=duration_ms,
            at_ms=self.clock.now_ms(),
        )
        failures = self.d.ledger.record(attempt)  # recorded BEFORE the throw: the count sees every failure
        if error is None:
            return {"endpoint_id": endpoint.id, "event_id": event.id, "topic": event.topic, "status": status}
        if self.d.disable_after is not None and failures >= self.d.disable_after:
            self.d.ledger.disable(
                endpoint.id,
                at_ms=self.clock.now_ms(),
                reason=f"{failures} consecutive failed deliveries, the last {error.code}",
            )
            log_event(
                logging.WARNING,
                "jobs.webhook.endpoint-disabled",
                job=self.d.name,
                endpoint=endpoint.id,
                failures=failures,
                code=error.code,
            )
        raise error from failure

    def _verdict(
        self,
        endpoint: _Endpoint,
        status: int | None,
        text: str,
        headers: Mapping[str, str],
        failure: Exception | None,
    ) -> CodedError | None:
        meta: dict[str, Any] = {"job": self.d.name, "endpoint": endpoint.id, "status": status}
        if status is None:
            return WebhookDeliveryFailedError(
                f"{self.d.name}: the POST to endpoint {endpoint.id} got no answer ({type(failure).__name__}: "
                f"{str(failure)[:200]}); it is retried with backoff",
                meta,
            )
        if 200 <= status < 300:
            return None
        said = f" — {text[:200]!r}" if text else ""
        if status in (429, 503):
            seconds = retry_after_seconds(headers.get("retry-after"), headers.get("date"), self.clock.now_ms() / 1000)
            if seconds is not None:
                meta["retryAfterSeconds"] = seconds
            return WebhookDeliveryThrottledError(
                f"{self.d.name}: endpoint {endpoint.id} answered {status}{said}; retried after "
                + (f"its Retry-After of {seconds:g} s" if seconds is not None else "the backoff (no Retry-After)"),
                meta,
            )
        if 300 <= status < 400:
            location = headers.get("location", "")
            meta["location"] = location[:200]
            return WebhookDeliveryFailedError(
                f"{self.d.name}: endpoint {endpoint.id} answered {status} (to {location[:120]!r}); a redirect is "
                "never followed — a body signed for one host is not re-POSTed elsewhere. Fix the endpoint's URL",
                meta,
            )
        if 400 <= status < 500 and status != 408:
            return WebhookDeliveryRejectedError(
                f"{self.d.name}: endpoint {endpoint.id} refused the delivery with {status}{said}; it is not retried",
                meta,
            )
        return WebhookDeliveryFailedError(
            f"{self.d.name}: endpoint {endpoint.id} answered {status}{said}; it is retried with backoff", meta
        )


def retry_after_seconds(value: str | None, date: str | None, now_s: float) -> float | None:
    """A ``Retry-After`` header's wait in seconds: delta-seconds, or an HTTP-date measured against the
    response's own ``Date`` (``now_s`` when it has none). Zero, a past date or an unreadable value is
    ``None`` (unstated).

    >>> retry_after_seconds("120", None, 0), retry_after_seconds("Wed, 21 Oct 2026 07:28:30 GMT",
    ...                                                          "Wed, 21 Oct 2026 07:28:00 GMT", 0)
    (120.0, 30.0)
    """
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        seconds = float(int(text))
        return seconds if seconds > 0 else None
    when = _http_date(text)
    if when is None:
        return None
    base = _http_date(date) if date else None
    delta = when - (base if base is not None else now_s)
    return delta if delta > 0 else None


def _http_date(text: str) -> float | None:
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


def _head(response: Any) -> str:
    """The first bytes of the response body, for the failure message; the rest is never read."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= ERROR_TEXT_BYTES:
            break
    return b"".join(chunks)[:ERROR_TEXT_BYTES].decode("utf-8", "replace").strip()


def _read(record: Any, key: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(key)
    return getattr(record, key, None)
