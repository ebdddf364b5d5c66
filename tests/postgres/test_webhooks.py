"""``webhook()`` against a real HTTP receiver on 127.0.0.1 (a thread server in this process), driven by the
executor a worker uses with a frozen clock: the signature the receiver helper verifies, and the forgeries
it refuses; Retry-After in both forms; a 3xx never followed; disable-after-N; the deadline, a lost lease
and the drain; the tenant rule before either seam reads; the two ledgers and the admin pages.

Most tests run on the memory driver and ledger; the Django-model ledger runs on Postgres.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from django.test import Client

from tests.conftest import JobsEnv, installed
from tests.webhook_receiver import Received, Receiver, Reply, running_receiver
from ultimate_jobs import memory_webhook_ledger, verify_webhook_signature, webhook
from ultimate_jobs.core.execute import AttemptEnv, execute_job
from ultimate_jobs.core.signals import CancelSignal
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import JobDrainedError, LeaseLostError, UltimateError
from ultimate_jobs.models import WebhookDelivery, WebhookEndpointState
from ultimate_jobs.testing import FrozenClock, run_jobs
from ultimate_jobs.webhooks import (
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TOPIC_HEADER,
    MemoryWebhookLedger,
    WebhookEndpoint,
    WebhookEvent,
    WebhookInput,
    django_webhook_ledger,
    retry_after_seconds,
    signed_content,
    webhook_signature,
)

SECRET = "whsec_test_secret"
NO_JITTER = {"attempts": 10, "backoff": "fixed", "delay": "1s", "max_delay": "1h", "jitter": False}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as server:
        yield server


@dataclasses.dataclass
class Seams:
    """What the endpoint and event seams answer, and how often they were read."""

    url: str
    endpoint_headers: dict[str, str] = dataclasses.field(default_factory=dict)
    disabled: bool = False
    reads: int = 0
    body: Any = dataclasses.field(default_factory=lambda: {"order": "o-1", "total": "12.00"})

    def endpoint(self, i: WebhookInput) -> WebhookEndpoint | None:
        self.reads += 1
        if i.endpoint_id == "missing":
            return None
        return WebhookEndpoint(id=i.endpoint_id, url=self.url, secret=SECRET, headers=self.endpoint_headers,
                               disabled=self.disabled)  # fmt: skip

    def event(self, i: WebhookInput) -> WebhookEvent | None:
        self.reads += 1
        if i.event_id == "missing":
            return None
        return WebhookEvent(id=i.event_id, topic="orders.paid", body=self.body)


def declare(seams: Seams, ledger: Any = None, **options: Any) -> Any:
    return webhook(
        name=options.pop("name", "partner.webhooks"),
        tenant=options.pop("tenant", "none"),
        endpoint=seams.endpoint,
        event=seams.event,
        ledger=ledger if ledger is not None else memory_webhook_ledger(),
        retry=options.pop("retry", NO_JITTER),
        **options,
    )


def as_request(received: Received, **changes: Any) -> Any:
    headers = {**received.headers, **changes.pop("headers", {})}
    return dataclasses.replace(received, headers=headers, **changes)


def test_a_delivery_is_signed_and_the_receiver_helper_verifies_it(jobs: JobsEnv, receiver: Receiver) -> None:
    seams = Seams(receiver.url, endpoint_headers={"X-Ultimate-Webhook-Signature": "t=1,v1=forged", "X-Partner": "p"})
    ledger = memory_webhook_ledger()
    deliver = declare(seams, ledger)
    enqueued = deliver.enqueue({"endpoint_id": "ep-1", "event_id": "evt_01HZ"})
    report = run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    assert report.outcomes["completed"] == 1
    assert report.last(enqueued.id).result == {  # type: ignore[union-attr]
        "endpoint_id": "ep-1", "event_id": "evt_01HZ", "topic": "orders.paid", "status": 200,
    }  # fmt: skip
    (got,) = receiver.requests
    sent_at = jobs.clock.now_ms() // 1000
    assert got.headers[WEBHOOK_ID_HEADER] == "evt_01HZ" and got.headers[WEBHOOK_TOPIC_HEADER] == "orders.paid"
    assert got.headers[WEBHOOK_SIGNATURE_HEADER].startswith(f"t={sent_at},v1=")  # send time, not event time
    assert got.headers["x-partner"] == "p"  # the endpoint's headers go under the framework's
    assert got.body == b'{"order":"o-1","total":"12.00"}'
    verified = verify_webhook_signature(got, SECRET, now=sent_at)
    assert (verified.event_id, verified.topic) == ("evt_01HZ", "orders.paid")
    assert verified.json() == {"order": "o-1", "total": "12.00"}
    (attempt,) = ledger.attempts()
    assert (attempt.endpoint_id, attempt.status, attempt.ok, attempt.code, attempt.attempt) == ("ep-1", 200, True,
                                                                                               None, 1)  # fmt: skip


@pytest.mark.parametrize("shape", ["a dict", "an object"])
def test_an_event_record_with_no_id_is_signed_under_the_enqueued_event_id(
    jobs: JobsEnv, receiver: Receiver, shape: str
) -> None:
    """The spec's lookup answers ``{topic, body}``: the event IS the one the delivery names."""
    record = {"topic": "orders.paid", "body": {"order": "o-7"}}
    seams = Seams(receiver.url)
    deliver = webhook(
        name="partner.spec-shape",
        tenant="none",
        endpoint=seams.endpoint,
        event=lambda i: dict(record) if shape == "a dict" else types.SimpleNamespace(**record),
        ledger=memory_webhook_ledger(),
        retry=NO_JITTER,
    )
    enqueued = deliver.enqueue({"endpoint_id": "ep-1", "event_id": "evt_01HZ"})
    last = run_jobs(jobs.driver, clock=jobs.clock, advance=False).last(enqueued.id)
    assert last is not None and last.outcome == "completed", last
    (got,) = receiver.requests
    assert got.headers[WEBHOOK_ID_HEADER] == "evt_01HZ"
    verified = verify_webhook_signature(got, SECRET, now=jobs.clock.now_ms() // 1000)
    assert (verified.event_id, verified.topic, verified.json()) == ("evt_01HZ", "orders.paid", {"order": "o-7"})


def test_forgeries_do_not_verify(jobs: JobsEnv, receiver: Receiver) -> None:
    seams = Seams(receiver.url, body={"event": "evt_1"})
    declare(seams).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    (got,) = receiver.requests
    now = jobs.clock.now_ms() // 1000
    assert verify_webhook_signature(got, SECRET, now=now).event_id == "evt_1"

    def refused(request: Any, **options: Any) -> str:
        with pytest.raises(UltimateError) as caught:
            verify_webhook_signature(request, options.pop("secret", SECRET), now=options.pop("now", now), **options)
        assert caught.value.code == "X_WEBHOOK_SIGNATURE_INVALID"
        return caught.value.message

    assert "mac does not match" in refused(as_request(got, body=got.body.replace(b"evt_1", b"evt_2")))
    assert "mac does not match" in refused(got, secret="another secret")
    # re-dated into the window: the timestamp is inside the mac
    redated = got.headers[WEBHOOK_SIGNATURE_HEADER].replace(f"t={now}", f"t={now + 60}")
    assert "mac does not match" in refused(as_request(got, headers={WEBHOOK_SIGNATURE_HEADER: redated}), now=now + 60)
    # stale: outside the tolerance either way
    assert "outside 300 s" in refused(got, now=now + 301)
    assert "outside 30 s" in refused(got, now=now - 31, tolerance=30)
    # the same canonical bytes under another id/topic split: one mac would authenticate both, so ':' is refused
    moved_topic = {WEBHOOK_TOPIC_HEADER: 'orders.paid:{"event"'}
    moved_id = {WEBHOOK_ID_HEADER: "evt_1:orders.paid", WEBHOOK_TOPIC_HEADER: '{"event"'}
    for headers in (moved_topic, moved_id):
        forged = as_request(got, headers=headers, body=b'"evt_1"}')
        split = ":".join(["v1", str(now), forged.headers[WEBHOOK_ID_HEADER], forged.headers[WEBHOOK_TOPIC_HEADER]])
        assert f"{split}:".encode() + forged.body == signed_content(now, "evt_1", "orders.paid", got.body)
        assert "cannot have been signed" in refused(forged)
    missing = {k: v for k, v in got.headers.items() if k != WEBHOOK_ID_HEADER}
    assert "missing" in refused(dataclasses.replace(got, headers=missing))
    garbled = as_request(got, headers={WEBHOOK_SIGNATURE_HEADER: "v1=abc"})
    assert "not t=<seconds>" in refused(garbled)


def http_date(at: datetime) -> str:
    return format_datetime(at, usegmt=True)


@pytest.mark.parametrize("form", ["delta-seconds", "http-date"])
def test_a_429_waits_out_its_retry_after(jobs: JobsEnv, receiver: Receiver, form: str) -> None:
    served = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # the receiver's clock: nothing like the frozen one
    headers = (
        {"retry-after": "120"}
        if form == "delta-seconds"
        else {"date": http_date(served), "retry-after": http_date(served + timedelta(seconds=120))}
    )
    receiver.reply(Reply(429, headers, b"slow down"))
    ledger = memory_webhook_ledger()
    enqueued = declare(Seams(receiver.url), ledger).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    started = jobs.clock.now_ms()
    report = run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    first = report.last(enqueued.id)
    assert first is not None and first.outcome == "retried" and first.code == "X_WEBHOOK_DELIVERY_THROTTLED"
    assert first.resume_at_ms == started + 120_000
    assert first.error.meta["retryAfterSeconds"] == 120  # type: ignore[union-attr]
    assert [(a.status, a.code) for a in ledger.attempts()] == [(429, "X_WEBHOOK_DELIVERY_THROTTLED")]
    jobs.clock.advance(119_999)
    run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    assert receiver.count() == 1  # not a millisecond early
    jobs.clock.advance(1)
    report = run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    assert report.outcomes["completed"] == 1 and receiver.count() == 2


def test_a_retry_after_past_max_delay_is_clamped(jobs: JobsEnv, receiver: Receiver) -> None:
    receiver.reply(Reply(503, {"retry-after": "86400"}))
    retry = {**NO_JITTER, "max_delay": "10m"}
    enqueued = declare(Seams(receiver.url), retry=retry).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    started = jobs.clock.now_ms()
    last = run_jobs(jobs.driver, clock=jobs.clock, advance=False).last(enqueued.id)
    assert last is not None and last.resume_at_ms == started + 600_000


def test_retry_after_forms() -> None:
    date = "Wed, 21 Oct 2026 07:28:00 GMT"
    assert retry_after_seconds("30", None, 0) == 30
    assert retry_after_seconds("Wed, 21 Oct 2026 07:28:45 GMT", date, 0) == 45  # against the response's Date
    assert retry_after_seconds("Wed, 21 Oct 2026 07:28:45 GMT", None, 1_792_567_680) == 45  # no Date: our clock
    for unstated in ("0", "Wed, 21 Oct 2026 07:27:00 GMT", "soon", "", None, "-5"):
        assert retry_after_seconds(unstated, date, 0) is None


def test_a_redirect_is_a_failure_and_is_never_followed(jobs: JobsEnv, receiver: Receiver) -> None:
    receiver.reply(Reply(307, {"location": receiver.url.replace("/hooks/orders", "/elsewhere")}))
    ledger = memory_webhook_ledger()
    enqueued = declare(Seams(receiver.url), ledger).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    last = run_jobs(jobs.driver, clock=jobs.clock, advance=False).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("retried", "X_WEBHOOK_DELIVERY_FAILED")
    assert "never followed" in last.error.message  # type: ignore[union-attr]
    assert [r.path for r in receiver.requests] == ["/hooks/orders"]
    assert [(a.status, a.ok) for a in ledger.attempts()] == [(307, False)]


def test_after_disable_after_failures_nothing_more_is_sent(jobs: JobsEnv, receiver: Receiver) -> None:
    receiver.default = Reply(500, body=b"down")
    ledger = memory_webhook_ledger()
    deliver = declare(Seams(receiver.url), ledger, disable_after=3)
    first = deliver.enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    report = run_jobs(jobs.driver, clock=jobs.clock)
    last = report.last(first.id)
    assert last is not None and (last.outcome, last.code, last.attempt) == (
        "dead-lettered", "X_WEBHOOK_ENDPOINT_DISABLED", 4,
    )  # fmt: skip
    assert receiver.count() == 3 and ledger.is_disabled("ep-1") and ledger.consecutive_failures("ep-1") == 3
    assert [a.code for a in ledger.attempts()] == ["X_WEBHOOK_DELIVERY_FAILED"] * 3  # each recorded before its throw
    second = deliver.enqueue({"endpoint_id": "ep-1", "event_id": "evt_2"})
    assert run_jobs(jobs.driver, clock=jobs.clock).last(second.id).code == "X_WEBHOOK_ENDPOINT_DISABLED"  # type: ignore[union-attr]
    assert receiver.count() == 3
    deliver.enqueue({"endpoint_id": "ep-2", "event_id": "evt_2"})  # per endpoint: ep-2 still receives
    run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    assert receiver.count() == 4 and not ledger.is_disabled("ep-2")
    receiver.default = Reply(200)
    ledger.enable("ep-1")  # re-enabling is the app's
    third = deliver.enqueue({"endpoint_id": "ep-1", "event_id": "evt_3"})
    assert run_jobs(jobs.driver, clock=jobs.clock, advance=False).last(third.id).outcome == "completed"  # type: ignore[union-attr]
    assert ledger.consecutive_failures("ep-1") == 0


def test_the_endpoints_own_disabled_flag_sends_nothing(jobs: JobsEnv, receiver: Receiver) -> None:
    seams = Seams(receiver.url, disabled=True)
    enqueued = declare(seams).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    last = run_jobs(jobs.driver, clock=jobs.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_WEBHOOK_ENDPOINT_DISABLED")
    assert receiver.count() == 0


def in_flight(jobs: JobsEnv, receiver: Receiver, signal: CancelSignal) -> tuple[threading.Thread, list[Any]]:
    """One attempt of the job queued in ``jobs`` started on a thread; answers once its POST reached the
    receiver (whose reply is held)."""
    (claimed,) = jobs.driver.claim(queues=["default"], limit=1, worker_id="w1").jobs
    executions: list[Any] = []
    thread = threading.Thread(
        target=lambda: executions.append(
            execute_job(claimed, AttemptEnv(driver=jobs.driver, clock=jobs.clock), signal=signal)
        )
    )
    thread.start()
    assert receiver.arrived.wait(10)
    return thread, executions


def test_the_deadline_tears_the_post_down_and_records_nothing(jobs: JobsEnv, receiver: Receiver) -> None:
    receiver.reply(Reply(200, hold=threading.Event()))
    ledger = memory_webhook_ledger()
    declare(Seams(receiver.url), ledger, timeout="5s").enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    thread, executions = in_flight(jobs, receiver, CancelSignal())
    jobs.clock.advance(5_000)  # the attempt's deadline, on the frozen clock
    thread.join(10)
    assert not thread.is_alive()
    (execution,) = executions
    assert (execution.outcome, execution.code) == ("retried", "X_JOB_TIMEOUT")
    assert ledger.attempts() == [] and ledger.consecutive_failures("ep-1") == 0
    assert not receiver.answered.is_set()


def test_a_lost_lease_tears_the_post_down_and_records_nothing(jobs: JobsEnv, receiver: Receiver) -> None:
    receiver.reply(Reply(200, hold=threading.Event()))
    ledger = memory_webhook_ledger()
    declare(Seams(receiver.url), ledger).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    signal = CancelSignal()
    thread, executions = in_flight(jobs, receiver, signal)
    signal.abort(LeaseLostError("another worker owns the row now"))
    thread.join(10)
    assert not thread.is_alive() and executions[0].code == "X_JOB_LEASE_LOST"
    assert ledger.attempts() == []


def test_the_drain_lets_a_post_on_the_wire_finish_and_records_it(jobs: JobsEnv, receiver: Receiver) -> None:
    hold = threading.Event()
    receiver.reply(Reply(200, hold=hold))
    ledger = memory_webhook_ledger()
    declare(Seams(receiver.url), ledger, timeout="20s").enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    signal = CancelSignal()
    thread, executions = in_flight(jobs, receiver, signal)
    signal.abort(JobDrainedError("worker w1 is draining (SIGTERM)"))
    thread.join(0.3)
    assert thread.is_alive()  # still on the wire: the drain does not tear it down
    hold.set()
    thread.join(10)
    # the receiver marks its reply written after the flush: the sender may have read it a moment before
    assert executions[0].outcome == "completed" and receiver.answered.wait(10)
    assert [(a.status, a.ok) for a in ledger.attempts()] == [(200, True)]


def test_a_drained_post_is_still_torn_down_at_the_deadline(jobs: JobsEnv, receiver: Receiver) -> None:
    receiver.reply(Reply(200, hold=threading.Event()))
    ledger = memory_webhook_ledger()
    declare(Seams(receiver.url), ledger, timeout="5s").enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    signal = CancelSignal()
    thread, _ = in_flight(jobs, receiver, signal)
    signal.abort(JobDrainedError("worker w1 is draining (SIGTERM)"))
    jobs.clock.advance(5_000)
    thread.join(10)
    assert not thread.is_alive() and ledger.attempts() == [] and not receiver.answered.is_set()


def test_the_drain_stops_a_post_not_yet_sent(jobs: JobsEnv, receiver: Receiver) -> None:
    ledger = memory_webhook_ledger()
    declare(Seams(receiver.url), ledger).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    (claimed,) = jobs.driver.claim(queues=["default"], limit=1, worker_id="w1").jobs
    signal = CancelSignal()
    signal.abort(JobDrainedError("worker w1 is draining (SIGTERM)"))
    execution = execute_job(claimed, AttemptEnv(driver=jobs.driver, clock=jobs.clock), signal=signal)
    assert (execution.outcome, execution.attempt) == ("interrupted", 1)
    assert receiver.count() == 0 and ledger.attempts() == []


def test_a_payload_org_that_is_not_the_runs_org_dies_before_either_seam_reads(
    jobs: JobsEnv, receiver: Receiver
) -> None:
    seams = Seams(receiver.url)
    unowned = declare(seams)  # tenant="none": any org_id is a mismatch
    enqueued = unowned.enqueue({"endpoint_id": "ep-1", "event_id": "evt_1", "org_id": "org-1"})
    last = run_jobs(jobs.driver, clock=jobs.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code, last.attempt) == (
        "dead-lettered", "X_JOB_TENANT_MISMATCH", 1,
    )  # fmt: skip
    # the upgrade to tenant=lambda i: i.org_id: a delivery queued before it, without an org, dead-letters
    owned = declare(seams, name="partner.owned", tenant=lambda i: i.org_id)
    request = owned.build_request({"endpoint_id": "ep-1", "event_id": "evt_2", "org_id": "org-1"})
    queued_before = jobs.driver.enqueue(
        dataclasses.replace(request, input={"endpoint_id": "ep-1", "event_id": "evt_2"}, tenant_id=None)
    )
    last = run_jobs(jobs.driver, clock=jobs.clock).last(queued_before.id)
    assert last is not None and (last.outcome, last.code, last.attempt) == (
        "dead-lettered", "X_JOB_TENANT_MISMATCH", 1,
    )  # fmt: skip
    assert seams.reads == 0 and receiver.count() == 0
    # re-enqueued with its org, it is delivered under that org
    fixed = owned.enqueue({"endpoint_id": "ep-1", "event_id": "evt_2", "org_id": "org-1"})
    assert run_jobs(jobs.driver, clock=jobs.clock).last(fixed.id).outcome == "completed"  # type: ignore[union-attr]
    with pytest.raises(UltimateError) as caught:
        owned.enqueue({"endpoint_id": "ep-1", "event_id": "evt_3"})  # refused at the caller, too
    assert caught.value.code == "X_JOB_TENANT_MISMATCH"


@pytest.mark.parametrize(
    ("input", "change", "code"),
    [
        ({"endpoint_id": "missing", "event_id": "evt_1"}, {}, "X_WEBHOOK_ENDPOINT_UNKNOWN"),
        ({"endpoint_id": "ep-1", "event_id": "missing"}, {}, "X_WEBHOOK_EVENT_UNKNOWN"),
        ({"endpoint_id": "ep-1", "event_id": "evt:1"}, {}, "X_WEBHOOK_EVENT_INVALID"),
        (
            {"endpoint_id": "ep-1", "event_id": "evt_1"},
            {"url": "ftp://u:pw@e.test/"},
            "X_WEBHOOK_ENDPOINT_INVALID",
        ),
        ({"endpoint_id": "ep-1", "event_id": "evt_1"}, {"url": "/relative"}, "X_WEBHOOK_ENDPOINT_INVALID"),
    ],
)
def test_unknown_and_invalid_records_are_terminal(
    jobs: JobsEnv, receiver: Receiver, input: dict[str, str], change: dict[str, str], code: str
) -> None:
    seams = Seams(change.get("url", receiver.url))
    enqueued = declare(seams).enqueue(input)
    last = run_jobs(jobs.driver, clock=jobs.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code, last.attempt) == ("dead-lettered", code, 1)
    assert "pw@" not in last.error.message  # type: ignore[union-attr]  # a URL's credentials are never quoted
    assert receiver.count() == 0


def test_an_unsendable_header_or_body_is_terminal(jobs: JobsEnv, receiver: Receiver) -> None:
    seams = Seams(receiver.url, endpoint_headers={"x-partner": "a\r\nx-injected: 1"})
    enqueued = declare(seams).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    last = run_jobs(jobs.driver, clock=jobs.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_WEBHOOK_ENDPOINT_INVALID")
    seams = Seams(receiver.url, body={"when": object()})
    enqueued = declare(seams, name="partner.other").enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    last = run_jobs(jobs.driver, clock=jobs.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_WEBHOOK_EVENT_INVALID")
    assert receiver.count() == 0


def test_a_4xx_is_rejected_for_good(jobs: JobsEnv, receiver: Receiver) -> None:
    receiver.reply(Reply(410, body=b"gone"))
    enqueued = declare(Seams(receiver.url)).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    last = run_jobs(jobs.driver, clock=jobs.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_WEBHOOK_DELIVERY_REJECTED")
    assert "'gone'" in last.error.message and receiver.count() == 1  # type: ignore[union-attr]


def test_no_answer_is_a_recorded_failure(jobs: JobsEnv) -> None:
    with running_receiver() as gone:
        url = gone.url
    ledger = memory_webhook_ledger()
    enqueued = declare(Seams(url), ledger).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    last = run_jobs(jobs.driver, clock=jobs.clock, advance=False).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("retried", "X_WEBHOOK_DELIVERY_FAILED")
    assert [(a.status, a.code) for a in ledger.attempts()] == [(None, "X_WEBHOOK_DELIVERY_FAILED")]


@pytest.mark.parametrize(
    ("options", "field"),
    [({"disable_after": 0}, "disable_after"), ({"ledger": object()}, "ledger"), ({"timeout": "0s"}, "timeout")],
)
def test_declaration_refusals(jobs: JobsEnv, options: dict[str, Any], field: str) -> None:
    with pytest.raises(UltimateError) as caught:
        declare(Seams("http://127.0.0.1:9/"), **options)
    assert (caught.value.code, caught.value.meta["field"]) == ("X_JOB_DECLARATION_INVALID", field)


def test_the_memory_ledger_is_bounded() -> None:
    ledger = MemoryWebhookLedger(size=3)
    base = {"event_id": "e", "topic": "t", "tenant_id": None, "job_id": "j", "run_id": "r", "attempt": 1,
            "url": "http://x", "status": 500, "code": "X", "error": None, "duration_ms": 1, "at_ms": 0}  # fmt: skip
    from ultimate_jobs.webhooks import WebhookAttempt

    for n in range(10):
        ledger.record(WebhookAttempt(endpoint_id=f"ep-{n}", ok=False, **base))  # type: ignore[arg-type]
    ledger.disable("ep-9", at_ms=0, reason="r")
    assert [a.endpoint_id for a in ledger.attempts()] == ["ep-7", "ep-8", "ep-9"]
    assert len(ledger._endpoints) <= 3 and ledger.is_disabled("ep-9")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_django_ledger_counts_failures_and_shows_in_the_admin(receiver: Receiver, admin_client: Client) -> None:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        receiver.reply(Reply(500), Reply(500))
        ledger = django_webhook_ledger()
        deliver = declare(Seams(receiver.url), ledger, disable_after=2)
        enqueued = deliver.enqueue({"endpoint_id": "ep-db", "event_id": "evt_1"})
        report = run_jobs(env.driver, clock=env.clock)
        assert report.last(enqueued.id).code == "X_WEBHOOK_ENDPOINT_DISABLED"  # type: ignore[union-attr]
    rows = list(WebhookDelivery.objects.order_by("id").values_list("attempt", "status_code", "consecutive_failures"))
    assert rows == [(1, 500, 1), (2, 500, 2)]
    state = WebhookEndpointState.objects.get(endpoint_id="ep-db")
    assert state.disabled_at is not None and "2 consecutive failed deliveries" in (state.disabled_reason or "")
    assert ledger.is_disabled("ep-db") and receiver.count() == 2
    page = admin_client.get("/admin/ultimate_jobs/webhookdelivery/")
    assert page.status_code == 200 and b"ep-db" in page.content and b"evt_1" in page.content
    first = WebhookDelivery.objects.order_by("id").first()
    assert first is not None
    page = admin_client.get(f"/admin/ultimate_jobs/webhookdelivery/{first.pk}/change/")
    assert page.status_code == 200 and b"ep-db" in page.content  # read-only: a view, no form to save
    assert admin_client.get("/admin/ultimate_jobs/webhookdelivery/x%00y/history/").status_code == 400
    page = admin_client.get("/admin/ultimate_jobs/webhookendpointstate/")
    assert page.status_code == 200 and b"ep-db" in page.content
    ledger.enable("ep-db")
    assert not ledger.is_disabled("ep-db")
    assert WebhookEndpointState.objects.get(endpoint_id="ep-db").consecutive_failures == 0


def test_the_view_decorator_answers_401_405_or_runs_the_view(jobs: JobsEnv, receiver: Receiver) -> None:
    from django.http import HttpResponse
    from django.test import RequestFactory

    from ultimate_jobs import webhook_receiver

    declare(Seams(receiver.url)).enqueue({"endpoint_id": "ep-1", "event_id": "evt_1"})
    run_jobs(jobs.driver, clock=jobs.clock, advance=False)
    (got,) = receiver.requests
    seen: list[Any] = []

    @webhook_receiver(secret=lambda request: ["an old secret", SECRET])  # rotating: either verifies
    def hook(request: Any) -> HttpResponse:
        seen.append(request.webhook)
        return HttpResponse(status=204)

    factory = RequestFactory()
    headers = {k: v for k, v in got.headers.items() if k.startswith("x-ultimate-webhook-")}

    def post(body: bytes) -> Any:
        return hook(factory.post("/hooks", data=body, content_type="application/json", headers=headers))

    # the delivery was signed on the frozen clock; the view checks against the real one
    assert post(got.body).status_code == 401 and seen == []
    fresh = int(time.time())
    headers[WEBHOOK_SIGNATURE_HEADER] = webhook_signature(SECRET, fresh, "evt_1", "orders.paid", got.body)
    assert post(got.body).status_code == 204 and [w.event_id for w in seen] == ["evt_1"]
    refused = post(got.body + b" ")
    assert refused.status_code == 401 and json.loads(refused.content)["code"] == "X_WEBHOOK_SIGNATURE_INVALID"
    assert hook(factory.get("/hooks")).status_code == 405 and len(seen) == 1
