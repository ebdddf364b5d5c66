"""Every way a request is built passes the one admission check (``ultimate_jobs.guards.admission.check_request``),
attacked with the shared bad-input set (tests/bad_requests.py): ``enqueue_as`` and a router's
``enqueue_many``, the scheduler's fire (on the memory driver and on Postgres, where a cron-built NUL byte
used to reach the SQL), a task's manual fire, ``django.tasks`` and the factories over ``job()``.
``enqueue`` on every driver and the outbox's stage are in test_enqueue_boundary.py. The check sits above
the drivers, so the memory driver stands for all of them where no statement is involved.

The scheduler's fire refuses the bad entry with its code in a log event and loses nothing else: the
occurrence's other entries are written, its watermark moves, and the next occurrence fires.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.bad_requests import BAD_INPUTS, BAD_REQUESTS, NUL, nul_key
from tests.conftest import AnyJobsEnv, JobsEnv
from tests.djtasks import tasks as djtasks
from ultimate_jobs import (
    Actor,
    JobRun,
    backfill,
    export_rows,
    job,
    job_scheduler,
    memory_webhook_ledger,
    purge,
    task,
    webhook,
)
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.core.routing import jobs_router
from ultimate_jobs.django_tasks import enqueue_key
from ultimate_jobs.errors import UltimateError

HOUR = 3_600_000
CODE = "X_JOB_REQUEST_INVALID"


def declare() -> JobHandle[Any, Any]:
    @job(name="ship", idempotency_key=nul_key, tenant="none")
    def ship(run: JobRun[Any]) -> None:
        return None

    return ship


BATCH_ENTRY_POINTS: dict[str, Callable[[JobHandle[Any, Any], Any, dict[str, Any]], Any]] = {
    "enqueue_as": lambda handle, value, options: handle.enqueue_as(Actor(id="user-1"), value, **options),
    "enqueue_many": lambda handle, value, options: jobs_router().enqueue_many(
        [handle.build_request({"key": "good"}), handle.build_request(value, **options)]
    ),
}


@pytest.mark.parametrize("entry", list(BATCH_ENTRY_POINTS))
@pytest.mark.parametrize("why", list(BAD_REQUESTS))
def test_enqueue_as_and_enqueue_many_refuse_the_set(jobs: JobsEnv, why: str, entry: str) -> None:
    value, options, field = BAD_REQUESTS[why]
    with pytest.raises(UltimateError) as caught:
        BATCH_ENTRY_POINTS[entry](declare(), value, options)
    assert caught.value.code == CODE and field in caught.value.message
    assert jobs.driver.stats() == []  # a batch is all or nothing: its good request was not written either


def ready(env: AnyJobsEnv) -> int:
    return sum(s.ready for s in env.driver.stats())


@pytest.mark.parametrize("why", list(BAD_INPUTS))
def test_the_scheduler_fire_refuses_a_bad_entry_and_fires_the_rest(
    any_jobs: AnyJobsEnv, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    value, field = BAD_INPUTS[why]
    ship = declare()

    @task(cron="0 * * * *", tz="UTC", name="hourly")
    def hourly(occurrence_ms: int) -> list[tuple[JobHandle[Any, Any], Any]]:
        return [(ship, value), (ship, {"key": f"good:{occurrence_ms}"})]

    scheduler = job_scheduler(driver=any_jobs.driver, tasks=[hourly], clock=any_jobs.clock)
    scheduler.start(loop=False)
    try:
        assert scheduler.run_once() == 0  # arms the watermark
        any_jobs.clock.advance(HOUR)
        with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
            assert scheduler.run_once() == 1
        refusals = [r for r in caplog.records if r.getMessage() == "jobs.scheduler.entry-refused"]
        assert len(refusals) == 1
        facts = refusals[0].jobs  # type: ignore[attr-defined]
        assert (facts["task"], facts["job"], facts["entry"], facts["code"]) == ("hourly", "ship", 0, CODE)
        assert field in facts["error"]
        assert (scheduler.stats.refused, scheduler.stats.failures) == (1, 0)
        assert ready(any_jobs) == 1  # the good entry of the same occurrence was written

        any_jobs.clock.advance(HOUR)
        assert scheduler.run_once() == 1  # the task moved on: the next occurrence fires
        assert (scheduler.stats.refused, scheduler.stats.fires, ready(any_jobs)) == (2, 2, 2)
    finally:
        scheduler.stop()


def test_an_entry_its_job_rejects_is_refused_the_same_way(jobs: JobsEnv) -> None:
    ship = declare()

    @job(name="typed", idempotency_key=lambda i: "k", tenant=lambda i: i["org"])
    def typed(run: JobRun[Any]) -> None:
        return None

    @task(cron="0 * * * *", tz="UTC", name="hourly")
    def hourly(occurrence_ms: int) -> list[tuple[JobHandle[Any, Any], Any]]:
        return [(typed, {"org": ""}), (ship, {"key": "good"})]

    admitted, refused = hourly.admit(jobs.clock.now_ms(), now_ms=jobs.clock.now_ms())
    assert [r.name for r in admitted] == ["ship"]
    assert [(r.job, r.index, r.error.code) for r in refused] == [("typed", 0, "X_JOB_TENANT_MISMATCH")]


@pytest.mark.parametrize("why", list(BAD_INPUTS))
def test_a_tasks_manual_fire_is_refused_whole(jobs: JobsEnv, why: str) -> None:
    value, field = BAD_INPUTS[why]
    ship = declare()

    @task(cron="0 * * * *", tz="UTC", name="hourly")
    def hourly(occurrence_ms: int) -> list[tuple[JobHandle[Any, Any], Any]]:
        return [(ship, {"key": "good"}), (ship, value)]

    with pytest.raises(UltimateError) as caught:
        hourly.enqueue()
    assert caught.value.code == CODE and field in caught.value.message
    assert jobs.driver.stats() == []  # one batch: the good entry was not written either


@pytest.mark.parametrize("why", list(BAD_INPUTS))
def test_a_django_task_enqueue_is_refused(jobs: JobsEnv, why: str) -> None:
    value, field = BAD_INPUTS[why]
    with pytest.raises(UltimateError) as caught:
        if field == "idempotency_key":  # a django.tasks key is named by the caller, not built from the input
            with enqueue_key(f"sum{NUL}"):
                djtasks.add.enqueue(1, 2)
        else:
            djtasks.add.enqueue(value, 2)
    assert caught.value.code == CODE
    assert jobs.driver.stats() == []


def _webhook() -> JobHandle[Any, Any]:
    pytest.importorskip("httpx")
    return webhook(
        name="w", tenant="none", endpoint=lambda i: None, event=lambda i: None, ledger=memory_webhook_ledger()
    )


FACTORIES: dict[str, tuple[Callable[[], JobHandle[Any, Any]], Any]] = {
    "backfill": (lambda: backfill(name="b", tenant="none", source=lambda c: [], handle=lambda r, s: None), {}),
    "purge": (lambda: purge(name="p", targets=lambda: []), {}),
    "export": (
        lambda: export_rows(name="e", tenant="none", prefix=lambda i: "x", source=lambda r: [], columns=["id"]),
        {},
    ),
    "webhook": (_webhook, {"endpoint_id": "e-1", "event_id": "ev-1"}),
}


@pytest.mark.parametrize("factory", list(FACTORIES))
@pytest.mark.parametrize("why", ["a NUL byte in the queue", "a run_id that is not a UUID", "run_at of 10**20"])
def test_a_factorys_enqueue_is_refused(jobs: JobsEnv, factory: str, why: str) -> None:
    build, value = FACTORIES[factory]
    _, options, field = BAD_REQUESTS[why]
    with pytest.raises(UltimateError) as caught:
        build().enqueue(value, **options)
    assert caught.value.code == CODE and field in caught.value.message
    assert jobs.driver.stats() == []


def test_a_webhooks_input_with_a_nul_byte_is_refused(jobs: JobsEnv) -> None:
    with pytest.raises(UltimateError) as caught:
        _webhook().enqueue({"endpoint_id": "e-1", "event_id": f"ev{NUL}1"})
    assert caught.value.code == CODE
    assert jobs.driver.stats() == []
