"""The ``/metrics`` view on the Postgres driver (spec "Metrics"): the five series with their labels after
jobs ran through a real worker, the gauges read with ONE stats statement per scrape whatever the number
of queues, and who may read it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, transaction
from django.test import Client
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Env, installed
from ultimate_jobs import JobRun, job, job_worker
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.executor import Executor, Params
from ultimate_jobs.drivers.postgres.queries import jobs as sql
from ultimate_jobs.drivers.postgres.wake import start_queue_wake
from ultimate_jobs.outbox import install_outbox, outbox_relay, outbox_store, set_outbox_store, uninstall_outbox
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

URL = "/jobs/metrics"
WAIT = 5.0
TOKEN = "scrape-token-0123456789"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class CountingExecutor:
    """The driver's executor, counting the statements it runs."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.alias = inner.alias
        self.statements: list[str] = []

    def query(self, sql_text: str, params: Params = None) -> list[tuple[Any, ...]]:
        self.statements.append(sql_text)
        return self.inner.query(sql_text, params)


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env[PostgresDriver]]:
    monkeypatch.setattr(
        "ultimate_jobs.drivers.postgres.driver.start_queue_wake", partial(start_queue_wake, read_timeout_ms=20)
    )
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        yield env


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    return client


def scrape(client: Client, **headers: str) -> Samples:
    response = client.get(URL, headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def declare(name: str, body: Callable[[JobRun[Any]], Any], **options: Any) -> Any:
    options.setdefault("tenant", "none")
    return job(name=name, idempotency_key=lambda i: f"{name}:{i['k']}", **options)(body)


def fail(run: JobRun[Any]) -> None:
    raise RuntimeError(f"{run.name} failed")


def test_the_five_series_with_their_labels_after_a_run(pg: Env[PostgresDriver], staff: Client) -> None:
    def charge_body(run: JobRun[Any]) -> None:
        if run.input["k"] == "bad":
            fail(run)

    def mail_body(run: JobRun[Any]) -> None:
        if run.input["k"] == "later":
            run.step.sleep("wait-a-day", "1d")
        fail(run)

    charge = declare("charge", charge_body, queue="payments", retry={"attempts": 1})
    mail = declare("mail", mail_body, queue="emails", retry={"attempts": 3, "delay": "1h", "jitter": False})
    declare("report", lambda run: None, queue="reports")  # registered, never enqueued
    before = {
        (q, o): counter("jobs_total", queue=q, outcome=o)
        for q in ("payments", "emails", "reports")
        for o in ("ok", "failed", "dead")
    }

    charge.enqueue({"k": "ok"})
    charge.enqueue({"k": "bad"})
    charge.enqueue({"k": "scheduled"}, delay="1h")
    mail.enqueue({"k": "bounce"})
    mail.enqueue({"k": "later"})
    worker = job_worker(driver=pg.driver, context=dict, clock=pg.clock, queues=["payments", "emails"], concurrency=4)
    worker.start(loop=False)
    try:
        worker.run_once()
        assert worker.wait_idle(WAIT)
    finally:
        worker.drain(deadline_ms=int(WAIT * 1000))
    charge.enqueue({"k": "waiting"})
    pg.clock.advance(90_000)

    samples = scrape(staff)

    # payments: "waiting" is ready and 90 s old, "scheduled" is delayed an hour; "bad" is dead
    assert value(samples, "queue_depth", queue="payments") == 2
    assert value(samples, "queue_oldest_ready_seconds", queue="payments") == 90.0
    assert value(samples, "queue_dead_jobs", queue="payments") == 1
    # emails: the bounce waits out its 1 h backoff (ready, not due); the sleeper is suspended, not waiting
    assert value(samples, "queue_depth", queue="emails") == 1
    assert value(samples, "queue_oldest_ready_seconds", queue="emails") == 0
    assert value(samples, "queue_dead_jobs", queue="emails") == 0
    # reports: a registered queue with no rows reports zeros rather than nothing
    for name in ("queue_depth", "queue_oldest_ready_seconds", "queue_dead_jobs"):
        assert value(samples, name, queue="reports") == 0
    # the counters this process moved, and every series primed for every queue
    moved = {("payments", "ok"): 1, ("payments", "dead"): 1, ("emails", "failed"): 1}
    for (queue, outcome), was in before.items():
        got = value(samples, "jobs_total", queue=queue, outcome=outcome)
        assert got == was + moved.get((queue, outcome), 0), (queue, outcome)
    for queue in ("payments", "emails", "reports"):
        assert ("job_leases_lost_total", (("queue", queue),)) in samples


def test_one_stats_statement_per_scrape_for_every_queue(pg: Env[PostgresDriver], staff: Client) -> None:
    for n in range(6):
        declare(f"job{n}", lambda run: None, queue=f"q{n}").enqueue({"k": "1"})
    counting = CountingExecutor(pg.driver.executor)
    pg.driver.executor = counting

    samples = scrape(staff)
    # the queue gauges: one stats statement for every queue; the rate gauges (the demo shop declares a rate
    # limit, reconcile_payment's): one read of the rate schedules
    assert counting.statements == [sql.SQL_STATS, sql.SQL_RATE_STATE]
    assert {value(samples, "queue_depth", queue=f"q{n}") for n in range(6)} == {1}

    scrape(staff)
    assert counting.statements == [sql.SQL_STATS, sql.SQL_RATE_STATE] * 2


# -- who may read it ------------------------------------------------------------------------------


def test_by_default_only_staff_may_read(pg: Env[PostgresDriver], staff: Client) -> None:
    assert Client().get(URL).status_code == 403
    member = Client()
    member.force_login(User.objects.create_user("member"))
    assert member.get(URL).status_code == 403
    assert Client().get(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 403  # no token set
    assert staff.get(URL).status_code == 200
    assert staff.post(URL).status_code == 405


def test_a_bearer_token_admits_a_scraper(pg: Env[PostgresDriver], staff: Client, settings: Any) -> None:
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "METRICS_TOKEN": TOKEN}
    scrape(Client(), Authorization=f"Bearer {TOKEN}")
    wrong = Client().get(URL, headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert Client().get(URL).status_code == 401
    assert staff.get(URL).status_code == 200


def test_a_public_view_admits_anyone(pg: Env[PostgresDriver], settings: Any) -> None:
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "METRICS_PUBLIC": True}
    declare("open", lambda run: None, queue="public")
    assert value(scrape(Client()), "queue_depth", queue="public") == 0


@pytest.mark.parametrize(
    "config",
    [
        {"METRICS_PUBLIC": "yes"},
        {"METRICS_TOKEN": ""},
        {"METRICS_TOKEN": 42},
        {"METRICS_PUBLIC": True, "METRICS_TOKEN": TOKEN},
    ],
)
def test_bad_metrics_settings_fail_the_check(settings: Any, config: dict[str, Any]) -> None:
    from ultimate_jobs.apps import check_settings

    settings.ULTIMATE_JOBS = {"DRIVER": "memory", **config}
    (error,) = check_settings()
    assert error.id == "ultimate_jobs.X_SETTINGS_VALUE_INVALID"
    assert "METRICS_" in error.msg


def test_a_stats_read_that_fails_is_a_failed_scrape(
    pg: Env[PostgresDriver], staff: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> list[Any]:
        raise DatabaseError("the server closed the connection")

    monkeypatch.setattr(pg.driver, "stats", broken)
    response = staff.get(URL)
    assert response.status_code == 503


def test_the_outbox_gauges_count_pending_and_set_aside_rows(
    pg: Env[PostgresDriver], staff: Client, settings: Any
) -> None:
    settings.ULTIMATE_JOBS = {**settings.ULTIMATE_JOBS, "OUTBOX": "optional"}  # the gauges follow the setting
    handle = declare("staged_charge", lambda run: None)
    store = outbox_store()
    install_outbox(store=store, driver=pg.driver)
    try:
        with transaction.atomic():
            first = handle.enqueue({"k": "a"})
            handle.enqueue({"k": "b"})
        pg.clock.advance(30_000)
        with connection.cursor() as cursor:  # unpublishable: a run_at no timestamp can hold
            cursor.execute(
                "UPDATE x_outbox SET request = jsonb_set(request, '{run_at_ms}', '100000000000000000000') "
                "WHERE id = %s",
                [first.id],
            )
        relay = outbox_relay(store=store, driver=pg.driver, clock=pg.clock, batch_size=1)
        relay.run_once()  # "a" is set aside; "b" waits for the next pass
        samples = scrape(staff)
        assert value(samples, "outbox_pending") == 1
        assert value(samples, "outbox_failed") == 1
        assert value(samples, "outbox_oldest_seconds") == 30.0
    finally:
        uninstall_outbox()
        set_outbox_store(None)
