"""Traces (spec "Trace and actor"): an enqueue stamps the current span's traceparent on the row, the
worker opens the job's span as its child, and ``enqueue_as`` records ``enqueued_by`` — attribution,
never authority. Without OpenTelemetry both halves are no-ops."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JobsEnv
from ultimate_jobs import Actor, JobRun, job, job_worker
from ultimate_jobs.contracts.operator import JobRecord
from ultimate_jobs.contracts.outbox import request_from_json, request_to_json
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.core.tracing import current_traceparent
from ultimate_jobs.testing import run_jobs

otel_trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")

ROOT = Path(__file__).resolve().parents[2]
WAIT = 5.0


class Capture(sdk_trace.SpanProcessor):
    """Keeps the spans that end while a test listens (the provider is process-wide and outlives it)."""

    def __init__(self) -> None:
        self.listening = False
        self.spans: list[Any] = []

    def on_end(self, span: Any) -> None:
        if self.listening:
            self.spans.append(span)


def _install() -> Capture:
    """One SDK provider for the process (OpenTelemetry allows the global provider to be set once)."""
    provider = otel_trace.get_tracer_provider()
    if not isinstance(provider, sdk_trace.TracerProvider):
        provider = sdk_trace.TracerProvider()
        otel_trace.set_tracer_provider(provider)
    capture = Capture()
    provider.add_span_processor(capture)
    return capture


CAPTURE = _install()


@pytest.fixture
def spans() -> Iterator[Capture]:
    CAPTURE.spans.clear()
    CAPTURE.listening = True
    try:
        yield CAPTURE
    finally:
        CAPTURE.listening = False
        CAPTURE.spans.clear()


def tracer() -> Any:
    return otel_trace.get_tracer("tests")


def declare(name: str, body: Any, **options: Any) -> JobHandle[Any, Any]:
    options.setdefault("tenant", "none")
    options.setdefault("retry", {"attempts": 2, "delay": 1000, "jitter": False})
    return job(name=name, idempotency_key=lambda i: f"{name}:{i['k']}", **options)(body)


def row(env: JobsEnv, job_id: str) -> JobRecord:
    record = env.driver.operator.get(job_id)
    assert record is not None
    return record


def traceparent_of(span: Any) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def job_spans(capture: Capture, name: str) -> list[Any]:
    return [s for s in capture.spans if s.name == f"job {name}"]


# -- the enqueue ---------------------------------------------------------------------------------


def test_an_enqueue_inside_a_span_stamps_its_traceparent(jobs: JobsEnv, spans: Capture) -> None:
    charge = declare("charge", lambda run: None)
    with tracer().start_as_current_span("checkout") as checkout:
        job_id = charge.enqueue({"k": "1"}).id
    assert row(jobs, job_id).traceparent == traceparent_of(checkout)


def test_the_traceparent_rides_in_an_outbox_row(jobs: JobsEnv, spans: Capture) -> None:
    charge = declare("charge", lambda run: None)
    with tracer().start_as_current_span("checkout") as checkout:
        staged = request_to_json(charge.build_request({"k": "1"}))
    assert request_from_json(json.loads(json.dumps(staged))).traceparent == traceparent_of(checkout)


def test_an_enqueue_outside_any_span_stamps_nothing(jobs: JobsEnv, spans: Capture) -> None:
    charge = declare("charge", lambda run: None)
    assert current_traceparent() is None
    job_id = charge.enqueue({"k": "1"}).id
    assert row(jobs, job_id).traceparent is None


# -- the job's span ------------------------------------------------------------------------------


def test_the_jobs_span_is_a_child_of_the_enqueues_span(jobs: JobsEnv, spans: Capture) -> None:
    seen: list[str | None] = []
    charge = declare("charge", lambda run: seen.append(current_traceparent()), queue="payments")
    with tracer().start_as_current_span("checkout") as checkout:
        job_id = charge.enqueue({"k": "1"}).id
    report = run_jobs(jobs.driver, clock=jobs.clock)  # outside the checkout span: only the row links them
    assert report.outcomes["completed"] == 1

    (span,) = job_spans(spans, "charge")
    parent = checkout.get_span_context()
    assert span.context.trace_id == parent.trace_id
    assert span.parent is not None and span.parent.span_id == parent.span_id
    assert span.kind == otel_trace.SpanKind.CONSUMER
    assert span.status.status_code == otel_trace.StatusCode.UNSET
    assert dict(span.attributes) == {
        "messaging.system": "ultimate_jobs",
        "messaging.operation.type": "process",
        "messaging.destination.name": "payments",
        "messaging.message.id": job_id,
        "ultimate_jobs.job.id": job_id,
        "ultimate_jobs.job.run_id": row(jobs, job_id).run_id,
        "ultimate_jobs.job.name": "charge",
        "ultimate_jobs.job.queue": "payments",
        "ultimate_jobs.job.attempt": 1,
        "ultimate_jobs.job.outcome": "completed",
    }
    assert seen == [traceparent_of(span)]  # the job's span is current in the body


def test_a_job_enqueued_by_a_job_continues_the_trace(jobs: JobsEnv, spans: Capture) -> None:
    receipt = declare("receipt", lambda run: None)
    charge = declare("charge", lambda run: receipt.enqueue({"k": run.input["k"]}))
    with tracer().start_as_current_span("checkout") as checkout:
        charge.enqueue({"k": "1"})
    run_jobs(jobs.driver, clock=jobs.clock)

    (charged,) = job_spans(spans, "charge")
    (receipted,) = job_spans(spans, "receipt")
    trace_id = checkout.get_span_context().trace_id
    assert charged.context.trace_id == receipted.context.trace_id == trace_id
    assert receipted.parent.span_id == charged.context.span_id


def test_a_row_without_a_traceparent_starts_a_trace_of_its_own(jobs: JobsEnv, spans: Capture) -> None:
    charge = declare("charge", lambda run: None)
    charge.enqueue({"k": "1"})
    with tracer().start_as_current_span("test-harness") as harness:  # ambient, yet not the job's parent
        run_jobs(jobs.driver, clock=jobs.clock)
    (span,) = job_spans(spans, "charge")
    assert span.parent is None
    assert span.context.trace_id != harness.get_span_context().trace_id


def test_a_traceparent_that_does_not_parse_starts_a_new_trace(jobs: JobsEnv, spans: Capture) -> None:
    charge = declare("charge", lambda run: None)
    request = dataclasses.replace(charge.build_request({"k": "1"}), traceparent="00-not-a-traceparent")
    jobs.driver.enqueue(request)
    report = run_jobs(jobs.driver, clock=jobs.clock)
    assert report.outcomes["completed"] == 1
    (span,) = job_spans(spans, "charge")
    assert span.parent is None


def test_a_failed_attempt_marks_the_span_error_and_a_suspension_does_not(jobs: JobsEnv, spans: Capture) -> None:
    def flaky(run: JobRun[Any]) -> None:
        run.step.sleep("cool-down", "1s")
        raise RuntimeError("gateway down")

    declare("flaky", flaky).enqueue({"k": "1"})
    run_jobs(jobs.driver, clock=jobs.clock)

    outcomes = [(s.attributes["ultimate_jobs.job.outcome"], s.status.status_code) for s in job_spans(spans, "flaky")]
    assert outcomes == [
        ("suspended", otel_trace.StatusCode.UNSET),
        ("retried", otel_trace.StatusCode.ERROR),
        ("dead-lettered", otel_trace.StatusCode.ERROR),
    ]
    dead = job_spans(spans, "flaky")[-1]
    assert [e.name for e in dead.events] == ["exception"]
    assert dead.events[0].attributes["exception.message"] == "gateway down"
    assert dead.attributes["ultimate_jobs.job.attempt"] == 2


def test_the_workers_span_on_its_own_thread_is_the_child(jobs: JobsEnv, spans: Capture) -> None:
    charge = declare("charge", lambda run: None)
    with tracer().start_as_current_span("checkout") as checkout:
        charge.enqueue({"k": "1"})
    worker = job_worker(driver=jobs.driver, context=dict, clock=jobs.clock, queues=["default"], concurrency=1)
    worker.start(loop=False)
    try:
        worker.run_once()
        worker.wait_idle(WAIT)
    finally:
        worker.drain(deadline_ms=int(WAIT * 1000))
    (span,) = job_spans(spans, "charge")
    assert span.parent.span_id == checkout.get_span_context().span_id


# -- the actor -----------------------------------------------------------------------------------


def test_enqueue_as_records_the_actor_and_the_body_runs_without_its_identity(jobs: JobsEnv) -> None:
    actors: list[Actor] = []
    refund = job(
        name="refund",
        idempotency_key=lambda i: f"refund:{i['k']}",
        tenant=lambda i: i["org_id"],
    )(lambda run: actors.append(run.actor))
    job_id = refund.enqueue_as(Actor(id="user-7", org_id="org-1"), {"k": "1", "org_id": "org-1"}).id
    plain_id = refund.enqueue({"k": "2", "org_id": "org-1"}).id
    run_jobs(jobs.driver, clock=jobs.clock)

    assert row(jobs, job_id).enqueued_by == "user-7"
    assert row(jobs, plain_id).enqueued_by is None
    assert actors == [Actor(id=None, org_id="org-1"), Actor(id=None, org_id="org-1")]  # system authority


# -- without OpenTelemetry -----------------------------------------------------------------------

NO_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the package were not installed
import django
django.setup()
from ultimate_jobs import job, set_job_clock, set_job_driver
from ultimate_jobs.core import tracing
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.testing import FrozenClock, run_jobs

assert not tracing.OTEL_AVAILABLE
clock = FrozenClock()
driver = MemoryDriver(clock=clock)
set_job_clock(clock)
set_job_driver(driver)
ping = job(name="ping", idempotency_key=lambda i: "p", tenant="none")(lambda run: tracing.current_traceparent())
job_id = ping.enqueue({}).id
report = run_jobs(driver, clock=clock)
assert report.outcomes["completed"] == 1, report.outcomes
assert report.executions[0].result is None
assert driver.operator.get(job_id).traceparent is None
print("no-otel ok")
"""


def test_without_opentelemetry_both_halves_are_no_ops() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NO_OTEL)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no-otel ok"
