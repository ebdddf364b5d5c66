"""``ultimate_jobs.django_tasks.JobsBackend``: Django's ``@task`` functions enqueued through Django's own
API become ``x_jobs`` rows that our runner executes with our retries; ``get_result``/``refresh`` read the
row back (status, errors, the JSON return value) — on the memory driver and on Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction
from django.test import override_settings

from tests.conftest import AnyJobsEnv, installed
from tests.djtasks import tasks
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.django_tasks import BACKEND_PATH, JobsBackend, enqueue_key, task_queues
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.outbox import OutboxRouter, outbox_relay, postgres_outbox_store
from ultimate_jobs.testing import FrozenClock, run_jobs
from ultimate_jobs.worker.build import default_queues

try:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResultStatus, task_backends  # type: ignore[no-redef]
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[no-redef]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef]


@pytest.fixture(autouse=True)
def no_calls() -> Iterator[None]:
    tasks.CALLS.clear()
    yield
    tasks.CALLS.clear()


def test_the_capability_flags_are_all_true_and_the_backend_is_the_configured_one() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, JobsBackend)
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, True)


def test_an_enqueued_task_runs_on_our_runner_and_its_result_reads_back(any_jobs: AnyJobsEnv) -> None:
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    row = any_jobs.driver.operator.get(result.id)  # type: ignore[union-attr]
    assert row is not None
    assert (row.name, row.queue, row.state) == ("tests.djtasks.tasks.add", "default", "ready")
    enqueued = {"backend": "default", "enqueued_at_ms": any_jobs.clock.now_ms()}
    assert row.input == {"args": [2, 3], "kwargs": {}, "task": enqueued}
    assert row.tenant_id is None and row.idempotency_key.startswith("django-task:")
    assert row.max_attempts == 2  # OPTIONS["RETRY"]

    report = run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert report.outcomes["completed"] == 1
    assert tasks.CALLS == [("add", 2, 3)]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.is_finished and result.finished_at is not None and result.attempts == 1
    fetched = tasks.add.get_result(result.id)
    assert (fetched.status, fetched.return_value, fetched.args) == (TaskResultStatus.SUCCESSFUL, 5, [2, 3])


def test_each_enqueue_is_its_own_row_unless_the_caller_names_a_key(any_jobs: AnyJobsEnv) -> None:
    first, second = tasks.add.enqueue(1, 1), tasks.add.enqueue(1, 1)
    assert first.id != second.id  # the same arguments never dedupe by accident
    with enqueue_key("sum:1+1"):
        named = tasks.add.enqueue(1, 1)
        again = tasks.add.enqueue(1, 1)
    assert named.id == again.id  # a live row under the named key answers the second enqueue
    assert any_jobs.driver.operator.get(named.id).idempotency_key == "sum:1+1"  # type: ignore[union-attr]
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert tasks.CALLS.count(("add", 1, 1)) == 3


def test_a_failing_task_is_retried_then_failed_with_its_error(any_jobs: AnyJobsEnv) -> None:
    result = tasks.decline.enqueue("o-7")
    report = run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert [e.outcome for e in report.executions] == ["retried", "dead-lettered"]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2
    first, error = result.errors  # each attempt's
    assert first.exception_class_path == error.exception_class_path == "tests.djtasks.tasks.PaymentDeclined"
    assert error.exception_class is tasks.PaymentDeclined
    assert "card declined for o-7" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_worker_ids_name_the_worker_that_ran_each_attempt(any_jobs: AnyJobsEnv) -> None:
    done = tasks.add.enqueue(1, 2)
    failed = tasks.decline.enqueue("o-9")
    run_jobs(any_jobs.driver, clock=any_jobs.clock, worker_id="host-1-4242-a1b2c3")
    done.refresh()
    failed.refresh()
    assert (done.status, done.worker_ids) == (TaskResultStatus.SUCCESSFUL, ["host-1-4242-a1b2c3"])
    assert (failed.status, failed.worker_ids) == (TaskResultStatus.FAILED, ["host-1-4242-a1b2c3"] * 2)
    assert tasks.add.enqueue(3, 4).worker_ids == []  # not run yet: no attempt, no worker


def test_a_retried_task_reads_ready_with_the_error_so_far(any_jobs: AnyJobsEnv) -> None:
    result = tasks.decline.enqueue("o-8")
    run_jobs(any_jobs.driver, clock=any_jobs.clock, advance=False)  # the retry waits 1 s: not due yet
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert result.errors[0].exception_class_path == "tests.djtasks.tasks.PaymentDeclined"
    assert result.last_attempted_at is not None


def test_run_after_delays_the_row_until_then(any_jobs: AnyJobsEnv) -> None:
    at = datetime.fromtimestamp((any_jobs.clock.now_ms() + 60_000) / 1000, tz=UTC)
    result = tasks.add.using(run_after=at).enqueue(4, 4)
    row = any_jobs.driver.operator.get(result.id)  # type: ignore[union-attr]
    assert row is not None and row.run_at_ms == any_jobs.clock.now_ms() + 60_000
    assert run_jobs(any_jobs.driver, clock=any_jobs.clock, advance=False).executions == []
    any_jobs.clock.advance(60_000)
    run_jobs(any_jobs.driver, clock=any_jobs.clock, advance=False)
    assert tasks.add.get_result(result.id).return_value == 8


def test_priority_and_queue_name_are_the_rows_and_the_higher_priority_runs_first(any_jobs: AnyJobsEnv) -> None:
    low = tasks.relaxed.enqueue("low")
    high = tasks.urgent.enqueue("high")
    assert any_jobs.driver.operator.get(high.id).priority == 10  # type: ignore[union-attr]
    assert any_jobs.driver.operator.get(low.id).queue == "tasks-low"  # type: ignore[union-attr]
    run_jobs(any_jobs.driver, clock=any_jobs.clock, batch=1)
    assert tasks.CALLS == [("urgent", "high"), ("relaxed", "low")]
    assert tasks.urgent.using(priority=-5).enqueue("x").task.priority == -5


def test_a_task_that_takes_context_gets_its_result_id_and_attempt(any_jobs: AnyJobsEnv) -> None:
    result = tasks.with_context.enqueue(note="hi")
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert tasks.with_context.get_result(result.id).return_value == {"id": result.id, "attempt": 1, "note": "hi"}


def test_an_async_task_and_aenqueue_and_aget_result(any_jobs: AnyJobsEnv) -> None:
    result = asyncio.run(tasks.async_double.aenqueue(21))
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    fetched = asyncio.run(tasks.async_double.aget_result(result.id))
    assert fetched.return_value == 42
    # the thread-sensitive executor thread opened its own connection: close it, as a request's end would
    asyncio.run(sync_to_async(connections.close_all)())


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_aenqueue_inside_atomic_stages_in_the_transaction_as_enqueue_does() -> None:
    """The backend's ``aenqueue`` runs on the thread-sensitive thread: from async code entered with
    ``async_to_sync`` inside ``atomic()``, that is this thread and its transaction — the outbox stages the
    row, a rollback leaves none, a commit publishes it. And it does not block the loop: two at once."""
    clock = FrozenClock()
    driver = PostgresDriver(clock=clock)
    store = postgres_outbox_store(clock=clock)
    with installed(clock, driver):
        set_jobs_router(OutboxRouter(store=store, driver=driver))
        try:

            async def both(label: str) -> list[Any]:
                return list(await asyncio.gather(tasks.relaxed.aenqueue(label), tasks.add.aenqueue(1, 2)))

            with pytest.raises(RuntimeError, match="declined"), transaction.atomic():
                async_to_sync(both)("rolled-back")
                assert store.stats().pending == 2
                raise RuntimeError("declined")
            assert store.stats().pending == 0
            with transaction.atomic():
                relaxed, added = async_to_sync(both)("committed")
                assert driver.operator.get(relaxed.id) is None  # staged, not published yet
            assert outbox_relay(store=store, driver=driver, clock=clock, relay_id="relay-t").run_once() == 2
            run_jobs(driver, clock=clock, queues=["default", "tasks-low"])
            assert tasks.relaxed.get_result(relaxed.id).return_value == "committed"
            assert tasks.add.get_result(added.id).return_value == 3
            assert sorted(tasks.CALLS) == [("add", 1, 2), ("relaxed", "committed")]
        finally:
            set_jobs_router(None)


def test_a_return_value_that_is_not_json_fails_the_task(any_jobs: AnyJobsEnv) -> None:
    result = tasks.returns_set.enqueue()
    run_jobs(any_jobs.driver, clock=any_jobs.clock)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "builtins.TypeError"


def test_arguments_that_are_not_json_are_refused_at_the_enqueue(any_jobs: AnyJobsEnv) -> None:
    with pytest.raises(UltimateError) as caught:
        tasks.add.enqueue(datetime.now(UTC), 1)
    assert caught.value.code == "X_VALIDATION"


def test_unknown_ids_and_job_ids_are_not_results(any_jobs: AnyJobsEnv) -> None:
    @job(idempotency_key=lambda i: "k", tenant="none")
    def plain_job(run: JobRun[Any]) -> None:
        return None

    enqueued = plain_job.enqueue({})
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(enqueued.id)
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("00000000-0000-4000-8000-000000000000")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("not-an-id")


def test_a_tenant_option_names_the_rows_org(any_jobs: AnyJobsEnv) -> None:
    backend = JobsBackend(
        "tenanted", {"QUEUES": ["default", "tasks-low"], "OPTIONS": {"TENANT": "tests.djtasks.tasks.org_of"}}
    )
    mine = backend.enqueue(tasks.relaxed, (), {"label": "x"})  # the reader answers None: no org
    theirs = backend.enqueue(tasks.relaxed, (), {"label": "y", "org": "org-9"})
    assert any_jobs.driver.operator.get(mine.id).tenant_id is None  # type: ignore[union-attr]
    assert any_jobs.driver.operator.get(theirs.id).tenant_id == "org-9"  # type: ignore[union-attr]
    with pytest.raises(UltimateError) as caught:
        JobsBackend("odd", {"OPTIONS": {"TENANT": lambda task, args, kwargs: 7}}).enqueue(tasks.add, (1, 2), {})
    assert caught.value.code == "X_INVARIANT"


def test_bad_options_and_bad_tasks_are_refused() -> None:
    with pytest.raises(UltimateError) as caught:
        JobsBackend("bad", {"OPTIONS": {"RETRIES": 3}})
    assert caught.value.code == "X_INVARIANT" and "RETRIES" in caught.value.message
    with pytest.raises(InvalidTask):
        tasks.add.using(queue_name="nowhere")  # not one of the backend's QUEUES


def test_a_worker_without_queues_serves_the_backends_queues() -> None:
    assert {"default", "tasks-low", "compat"} <= set(default_queues())


def test_queues_set_to_any_name_is_warned_by_the_system_check() -> None:
    """``QUEUES: []`` is Django's "any queue name": a worker cannot serve names nobody lists, so the
    backend's check warns, and the worker serves ``default`` for it (issue 43, item 6)."""
    (warning,) = JobsBackend("any", {"QUEUES": []}).check()
    assert warning.id == "ultimate_jobs.X_SETTINGS_TASK_QUEUES_ANY" and "--queues" in warning.hint
    assert list(JobsBackend("listed", {"QUEUES": ["default"]}).check()) == []
    with override_settings(TASKS={"default": {"BACKEND": BACKEND_PATH, "QUEUES": []}}):
        assert task_queues() == {"default"}


def test_a_row_claimed_ahead_reads_ready_until_its_function_starts(any_jobs: AnyJobsEnv) -> None:
    """A worker's claim-ahead buffer holds rows claimed (``running``) that no slot has started: Django's
    RUNNING is "currently being executed", so they read READY until their attempt begins (issue 43, item 7)."""
    result = tasks.add.enqueue(5, 5)
    claim = any_jobs.driver.claim(queues=["default"], limit=1, worker_id="w-ahead")
    assert [c.id for c in claim.jobs] == [result.id]
    assert any_jobs.driver.operator.get(result.id).state == "running"  # type: ignore[union-attr]
    result.refresh()
    assert (result.status, result.worker_ids, result.started_at) == (TaskResultStatus.READY, [], None)
