"""Traces: an enqueue stamps the current span's W3C ``traceparent`` on the row, and the executor opens the
job's span as its child, so a checkout trace shows the HTTP span, the action span and the charge that
ran two seconds later as one trace.

OpenTelemetry is optional. With ``opentelemetry-api`` importable, :func:`current_traceparent` reads the
current span and :func:`job_span` starts a span on the app's tracer provider (a no-op tracer until the
app installs an SDK). Without it both are no-ops: no column is written, no span is opened.

The row carries ``traceparent`` only, always in the W3C format whatever propagator the app configured:
the column is named for it, and a worker in another process must be able to read it back.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import trace as otel_trace
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by a subprocess test with the package hidden
    OTEL_AVAILABLE = False
else:
    OTEL_AVAILABLE = True
    _PROPAGATOR = TraceContextTextMapPropagator()
    # a proxy until the app installs its provider, then that provider's tracer: safe to take at import
    _TRACER = otel_trace.get_tracer("ultimate_jobs")
    # a provider named by the environment is loaded by the first get_tracer_provider() call
    _PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ

if TYPE_CHECKING:
    from ..contracts.jobs import ClaimedJob
    from .outcomes import JobExecution

FAILED_OUTCOMES = frozenset({"retried", "dead-lettered", "dropped", "refused"})
"""Outcomes whose span ends with status ERROR; completed, suspended and interrupted leave it unset."""


def current_traceparent() -> str | None:
    """The current span's W3C ``traceparent`` (``00-<trace id>-<span id>-<flags>``), or ``None`` when
    OpenTelemetry is not installed or no valid span is current. ``build_request`` stamps it on the row."""
    if not OTEL_AVAILABLE or not otel_trace.get_current_span().get_span_context().is_valid:
        return None  # no span to carry (the common case without tracing): no propagator run per enqueue
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def job_span(claimed: ClaimedJob, execution: JobExecution | None = None) -> AbstractContextManager[Any]:
    """The job's span around one attempt: ``job <name>``, a CONSUMER span whose parent is the row's
    ``traceparent`` (a new trace when the row has none or it does not parse), current for the block so
    an enqueue from the body joins the trace. Nothing is opened for a row without ``traceparent`` while
    the app has installed no tracer provider. On exit it carries ``execution``'s outcome; a failing
    outcome (retried, dead-lettered, dropped, refused) sets status ERROR with the attempt's error, read
    off the execution — the verdict — not off whatever the body raised. A no-op without OpenTelemetry.
    """
    if not OTEL_AVAILABLE or (claimed.traceparent is None and not tracing_configured()):
        return nullcontext()  # no trace to continue and no provider to record one: nothing to do per job
    return _otel_job_span(claimed, execution)


def tracing_configured() -> bool:
    """Whether the app installed a tracer provider: until it does, OpenTelemetry's global is a proxy
    whose spans record nothing, so the executor opens none (no work per job for a span nobody reads).
    Reads the API's global directly when it can: ``get_tracer_provider()`` reads the environment on
    every call until a provider is set."""
    if not OTEL_AVAILABLE:
        return False
    if getattr(otel_trace, "_TRACER_PROVIDER", None) is not None:
        return True
    if hasattr(otel_trace, "_TRACER_PROVIDER") and not _PROVIDER_FROM_ENV:
        return False
    return not isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider)


@contextmanager
def _otel_job_span(claimed: ClaimedJob, execution: JobExecution | None) -> Iterator[Any]:
    parent = _PROPAGATOR.extract({"traceparent": claimed.traceparent}) if claimed.traceparent else Context()
    with _TRACER.start_as_current_span(
        f"job {claimed.name}",
        context=parent,
        kind=otel_trace.SpanKind.CONSUMER,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        if span.is_recording():
            span.set_attributes(_attributes(claimed))
        try:
            yield span
        except Exception as exc:  # a fault past the verdict (an ack that raised): recorded, then re-raised
            span.record_exception(exc)
            span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        if execution is not None and span.is_recording():
            _mark_outcome(span, execution)


def _attributes(claimed: ClaimedJob) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {
        "messaging.system": "ultimate_jobs",
        "messaging.operation.type": "process",
        "messaging.destination.name": claimed.queue,
        "messaging.message.id": claimed.id,
        "ultimate_jobs.job.id": claimed.id,
        "ultimate_jobs.job.run_id": claimed.run_id,
        "ultimate_jobs.job.name": claimed.name,
        "ultimate_jobs.job.queue": claimed.queue,
        "ultimate_jobs.job.attempt": claimed.attempt,
    }
    if claimed.tenant_id is not None:
        attributes["ultimate_jobs.job.tenant_id"] = claimed.tenant_id
    return attributes  # not enqueued_by: a person's id is not for a tracing backend by default


def _mark_outcome(span: Any, execution: JobExecution) -> None:
    span.set_attribute("ultimate_jobs.job.outcome", execution.outcome or "handed-back")
    if execution.code is not None:
        span.set_attribute("ultimate_jobs.job.code", execution.code)
    if execution.outcome in FAILED_OUTCOMES:
        if execution.error is not None:
            span.record_exception(execution.error)
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, execution.code or execution.outcome))
