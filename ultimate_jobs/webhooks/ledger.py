"""Where a webhook's attempts are recorded and an endpoint's disable is kept: the :class:`WebhookLedger` seam.

How long delivery history is kept is the app's answer (seven years for one business, thirty days for
the next), so the ledger is a seam. Two are ready: :func:`memory_webhook_ledger` (a bounded ring in one
process — development and tests) and :func:`django_webhook_ledger` (the ``WebhookDelivery`` and
``WebhookEndpointState`` tables, shown in the admin).

Every attempt that reached the receiver or failed on its own is recorded BEFORE the delivery raises, so
the consecutive-failure count sees every failure; ``disable_after`` writes only the ledger, and
``is_disabled`` is asked before every socket. Re-enabling is always the app's: ``ledger.enable(id)``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

DEFAULT_MEMORY_LEDGER_SIZE = 1_000


@dataclass(frozen=True, slots=True)
class WebhookAttempt:
    """One delivery attempt as the ledger records it. ``status`` is the HTTP status (``None`` when no
    response came back); ``code`` the failure's error code (``None`` when ``ok``)."""

    endpoint_id: str
    event_id: str
    topic: str
    tenant_id: str | None
    job_id: str
    run_id: str
    attempt: int
    url: str
    status: int | None
    ok: bool
    code: str | None
    error: str | None
    duration_ms: int
    at_ms: int


@runtime_checkable
class WebhookLedger(Protocol):
    """The seam a :func:`~ultimate_jobs.webhook` writes its attempts to and asks before every socket.

    >>> class AuditLedger:                      # your own: keep history as long as your business must
    ...     def record(self, attempt): ...       # store; answer the consecutive failures after it
    ...     def is_disabled(self, endpoint_id): ...
    ...     def disable(self, endpoint_id, *, at_ms, reason): ...
    ...     def enable(self, endpoint_id): ...
    >>> deliver = webhook(name="partner.webhooks", ..., ledger=AuditLedger())
    """

    def record(self, attempt: WebhookAttempt) -> int:
        """Store ``attempt``; answer the endpoint's consecutive failures after it (0 after a success)."""
        ...

    def is_disabled(self, endpoint_id: str) -> bool:
        """Whether the endpoint was disabled (and not re-enabled since): nothing more is sent to it."""
        ...

    def disable(self, endpoint_id: str, *, at_ms: int, reason: str) -> None:
        """Mark the endpoint disabled; only :meth:`enable` clears it."""
        ...

    def enable(self, endpoint_id: str) -> None:
        """Re-enable the endpoint and reset its consecutive failures (the app's decision, never the framework's)."""
        ...


@dataclass(slots=True)
class _EndpointState:
    consecutive_failures: int = 0
    disabled_reason: str | None = None


class MemoryWebhookLedger:
    """A bounded ledger in one process: the newest ``size`` attempts and the state of the ``size`` most
    recently used endpoints (a disabled one is kept). Nothing survives a restart — development only.

    >>> ledger = memory_webhook_ledger(size=100)
    >>> ledger.attempts()[-1].status
    200
    """

    def __init__(self, size: int = DEFAULT_MEMORY_LEDGER_SIZE) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            from ..errors import InvariantError

            raise InvariantError(f"memory_webhook_ledger: size must be a whole number >= 1, got {size!r}", {})
        self.size = size
        self._lock = threading.Lock()
        self._attempts: deque[WebhookAttempt] = deque(maxlen=size)
        self._endpoints: OrderedDict[str, _EndpointState] = OrderedDict()

    def _state(self, endpoint_id: str) -> _EndpointState:
        state = self._endpoints.get(endpoint_id)
        if state is None:
            state = self._endpoints[endpoint_id] = _EndpointState()
            while len(self._endpoints) > self.size:
                # forget the least recently used endpoint that is not disabled
                victim = next((k for k, s in self._endpoints.items() if s.disabled_reason is None), None)
                if victim is None or victim == endpoint_id:
                    break
                del self._endpoints[victim]
        self._endpoints.move_to_end(endpoint_id)
        return state

    def record(self, attempt: WebhookAttempt) -> int:
        with self._lock:
            self._attempts.append(attempt)
            state = self._state(attempt.endpoint_id)
            state.consecutive_failures = 0 if attempt.ok else state.consecutive_failures + 1
            return state.consecutive_failures

    def is_disabled(self, endpoint_id: str) -> bool:
        with self._lock:
            state = self._endpoints.get(endpoint_id)
            return state is not None and state.disabled_reason is not None

    def disable(self, endpoint_id: str, *, at_ms: int, reason: str) -> None:
        with self._lock:
            self._state(endpoint_id).disabled_reason = reason

    def enable(self, endpoint_id: str) -> None:
        with self._lock:
            state = self._state(endpoint_id)
            state.disabled_reason, state.consecutive_failures = None, 0

    def attempts(self, endpoint_id: str | None = None) -> list[WebhookAttempt]:
        """The attempts kept, oldest first (one endpoint's when ``endpoint_id`` is given)."""
        with self._lock:
            return [a for a in self._attempts if endpoint_id is None or a.endpoint_id == endpoint_id]

    def consecutive_failures(self, endpoint_id: str) -> int:
        """The endpoint's consecutive failures (0 for one never seen)."""
        with self._lock:
            state = self._endpoints.get(endpoint_id)
            return state.consecutive_failures if state is not None else 0


def memory_webhook_ledger(size: int = DEFAULT_MEMORY_LEDGER_SIZE) -> MemoryWebhookLedger:
    """A bounded in-process ledger — development and tests; production wants :func:`django_webhook_ledger`
    or its own.

    >>> deliver = webhook(name="partner.webhooks", ..., ledger=memory_webhook_ledger())
    """
    return MemoryWebhookLedger(size)


class DjangoWebhookLedger:
    """The ledger over the ``x_webhook_deliveries`` and ``x_webhook_endpoints`` tables (models
    ``WebhookDelivery`` and ``WebhookEndpointState``, read-only in the admin). ``record`` counts the
    endpoint's failures under a row lock, so two workers delivering to one endpoint never lose a count."""

    def __init__(self, using: str = "default") -> None:
        self.using = using

    def record(self, attempt: WebhookAttempt) -> int:
        from django.db import transaction

        from ..models import WebhookDelivery, WebhookEndpointState

        at = _at(attempt.at_ms)
        with transaction.atomic(using=self.using):
            state, _ = (
                WebhookEndpointState.objects.using(self.using)
                .select_for_update()
                .get_or_create(endpoint_id=attempt.endpoint_id, defaults={"updated_at": at})
            )
            state.consecutive_failures = 0 if attempt.ok else state.consecutive_failures + 1
            state.updated_at = at
            state.save(using=self.using, update_fields=["consecutive_failures", "updated_at"])
            WebhookDelivery.objects.using(self.using).create(
                endpoint_id=attempt.endpoint_id,
                event_id=attempt.event_id,
                topic=attempt.topic,
                tenant_id=attempt.tenant_id,
                job_id=attempt.job_id,
                run_id=attempt.run_id,
                attempt=attempt.attempt,
                url=attempt.url,
                status_code=attempt.status,
                ok=attempt.ok,
                error_code=attempt.code,
                error=attempt.error,
                duration_ms=attempt.duration_ms,
                consecutive_failures=state.consecutive_failures,
                created_at=at,
            )
            return state.consecutive_failures

    def is_disabled(self, endpoint_id: str) -> bool:
        from ..models import WebhookEndpointState

        return (
            WebhookEndpointState.objects.using(self.using)
            .filter(endpoint_id=endpoint_id, disabled_at__isnull=False)
            .exists()
        )

    def disable(self, endpoint_id: str, *, at_ms: int, reason: str) -> None:
        from ..models import WebhookEndpointState

        at = _at(at_ms)
        WebhookEndpointState.objects.using(self.using).update_or_create(
            endpoint_id=endpoint_id, defaults={"disabled_at": at, "disabled_reason": reason, "updated_at": at}
        )

    def enable(self, endpoint_id: str) -> None:
        from ..models import WebhookEndpointState

        WebhookEndpointState.objects.using(self.using).filter(endpoint_id=endpoint_id).update(
            disabled_at=None, disabled_reason=None, consecutive_failures=0
        )


def django_webhook_ledger(using: str = "default") -> DjangoWebhookLedger:
    """The ready-made ledger over Django models (``WebhookDelivery`` rows carry the endpoint's
    consecutive-failure count; both tables are in the admin). Opt in by passing it:

    >>> deliver = webhook(name="partner.webhooks", ..., ledger=django_webhook_ledger())
    """
    return DjangoWebhookLedger(using)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
