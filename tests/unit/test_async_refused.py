"""Where job code must stay synchronous, an ``async def`` — and the other shapes that call one — is refused
with ``X_JOB_ASYNC_UNSUPPORTED`` when it is handed over, instead of running it later as a coroutine object
that never executes: the key and tenant functions, ``concurrency.key``, the context factory, task bodies,
``cross_tenant``, signal callbacks (and, until they are built, the factories' callables). A job body, a
``step.run`` function and ``on_settled`` may be async (every shape below runs); an async generator
function is refused there too — nothing iterates it.

(An async function given to the ``django.tasks`` backend runs: tests/postgres/test_django_tasks.py.)
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from tests.conftest import JobsEnv
from ultimate_jobs import (
    CancelSignal,
    Concurrency,
    JobRun,
    PurgeTarget,
    backfill,
    cross_tenant,
    export_rows,
    job,
    memory_webhook_ledger,
    purge,
    task,
    webhook,
    webhook_receiver,
)
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.guards.sync_only import is_async_callable
from ultimate_jobs.testing import run_jobs
from ultimate_jobs.worker.boot import context_factory

CODE = "X_JOB_ASYNC_UNSUPPORTED"


async def coroutine_function(*args: Any) -> Any:
    return None


async def async_generator_function(*args: Any) -> AsyncIterator[Any]:
    yield None


class AsyncCallable:
    async def __call__(self, *args: Any) -> Any:
        return None


def sync_function(*args: Any) -> Any:
    return None


ASYNC_SHAPES: dict[str, Any] = {
    "an async def": coroutine_function,
    "an async generator function": async_generator_function,
    "an object whose __call__ is async": AsyncCallable(),
    "a partial of an async def": functools.partial(coroutine_function, 1),
    "a partial of a partial of an async callable object": functools.partial(functools.partial(AsyncCallable())),
    "an async lambda-like bound method": AsyncCallable().__call__,
}


def refusal(make: Callable[[], Any]) -> UltimateError:
    with pytest.raises(UltimateError) as caught:
        make()
    assert caught.value.code == CODE, caught.value
    assert "async_to_sync" in caught.value.message and "def" in caught.value.message
    return caught.value


@pytest.mark.parametrize("shape", list(ASYNC_SHAPES))
def test_every_async_shape_is_recognised(shape: str) -> None:
    assert is_async_callable(ASYNC_SHAPES[shape])


@pytest.mark.parametrize(
    "fn",
    [sync_function, functools.partial(sync_function, 1), async_to_sync(coroutine_function), print, dict, "text", None],
    ids=["def", "partial", "async_to_sync", "builtin", "class", "text", "None"],
)
def test_sync_callables_and_non_callables_pass(fn: Any) -> None:
    assert not is_async_callable(fn)


COROUTINE_SHAPES = [name for name in ASYNC_SHAPES if name != "an async generator function"]


def test_an_async_generator_job_body_is_refused_at_declaration(jobs: JobsEnv) -> None:
    declare = job(name="async.body", idempotency_key=lambda i: "k", tenant="none")
    error = refusal(lambda: declare(async_generator_function))
    assert error.meta["field"] == "body" and error.meta["job"] == "async.body"
    assert "async generator" in error.message
    assert jobs.driver.stats() == []


@pytest.mark.parametrize("shape", COROUTINE_SHAPES)
def test_every_coroutine_shape_runs_as_a_job_body(jobs: JobsEnv, shape: str) -> None:
    handle = job(name="async.body", idempotency_key=lambda i: "k", tenant="none")(ASYNC_SHAPES[shape])
    assert handle.is_async
    handle.enqueue({})
    report = run_jobs(jobs.driver, clock=jobs.clock)
    assert report.outcomes == {"completed": 1}


def test_an_async_body_wrapped_in_async_to_sync_runs(jobs: JobsEnv) -> None:
    ran: list[int] = []

    async def body(run: JobRun[Any]) -> int:
        ran.append(run.input["n"])
        return 7

    handle = job(name="async.wrapped", idempotency_key=lambda i: "k", tenant="none")(async_to_sync(body))
    handle.enqueue({"n": 3})
    report = run_jobs(jobs.driver, clock=jobs.clock)
    assert report.outcomes["completed"] == 1 and ran == [3]
    assert report.executions[0].result == 7


@pytest.mark.parametrize("field", ["idempotency_key", "tenant"])
def test_an_async_key_function_is_refused_at_declaration(jobs: JobsEnv, field: str) -> None:
    options: dict[str, Any] = {"name": "async.hook", "idempotency_key": lambda i: "k", "tenant": "none"}
    options[field] = coroutine_function
    error = refusal(lambda: job(**options)(sync_function))
    assert error.meta["field"] == field


def test_an_async_concurrency_key_is_refused_at_declaration(jobs: JobsEnv) -> None:
    concurrency = Concurrency(key=coroutine_function, limit=1)
    refusal(lambda: job(name="async.key", idempotency_key=lambda i: "k", tenant="none", concurrency=concurrency)(body))


def body(run: JobRun[Any]) -> None:
    return None


def test_an_async_generator_step_function_is_refused_and_never_stored(jobs: JobsEnv) -> None:
    after: list[str] = []

    @job(name="async.step", idempotency_key=lambda i: "k", tenant="none")
    def stepper(run: JobRun[Any]) -> None:
        run.step.run("fetch", async_generator_function)
        after.append("ran on")

    enqueued = stepper.enqueue({})
    report = run_jobs(jobs.driver, clock=jobs.clock)
    last = report.last(enqueued.id)
    assert last is not None and last.code == CODE and last.outcome == "dead-lettered"  # terminal: no retry
    assert report.outcomes == {"dead-lettered": 1}
    assert after == []
    assert jobs.driver.operator.steps(enqueued.id) == []


@pytest.mark.parametrize("shape", COROUTINE_SHAPES)
def test_an_async_step_function_in_a_sync_body_runs_and_is_stored(jobs: JobsEnv, shape: str) -> None:
    @job(name="async.step", idempotency_key=lambda i: "k", tenant="none")
    def stepper(run: JobRun[Any]) -> Any:
        return run.step.run("fetch", ASYNC_SHAPES[shape])

    enqueued = stepper.enqueue({})
    report = run_jobs(jobs.driver, clock=jobs.clock)
    assert report.outcomes == {"completed": 1}
    assert [s.name for s in jobs.driver.operator.steps(enqueued.id)] == ["fetch"]


@pytest.mark.parametrize("field", ["source", "handle", "count"])
def test_an_async_backfill_callable_is_refused_at_declaration(jobs: JobsEnv, field: str) -> None:
    callables: dict[str, Any] = {"source": sync_function, "handle": sync_function, "count": sync_function}
    callables[field] = coroutine_function
    error = refusal(lambda: backfill(name="async.backfill", tenant="none", **callables))
    assert error.meta == {"job": "async.backfill", "field": field, "callable": "coroutine_function"}


@pytest.mark.parametrize("field", ["row", "prefix", "source", "sink", "idempotency_key"])
def test_an_async_export_callable_is_refused_at_declaration(jobs: JobsEnv, field: str) -> None:
    callables: dict[str, Any] = {"prefix": sync_function, "source": sync_function, "row": sync_function}
    callables[field] = coroutine_function
    error = refusal(lambda: export_rows(name="async.export", tenant="none", columns=["id"], **callables))
    assert error.meta["field"] == field


@pytest.mark.parametrize("field", ["endpoint", "event"])
def test_an_async_webhook_callable_is_refused_at_declaration(jobs: JobsEnv, field: str) -> None:
    pytest.importorskip("httpx")
    callables: dict[str, Any] = {"endpoint": sync_function, "event": sync_function}
    callables[field] = coroutine_function
    error = refusal(lambda: webhook(name="async.webhook", tenant="none", ledger=memory_webhook_ledger(), **callables))
    assert error.meta["field"] == field


def test_an_async_webhook_receiver_view_or_secret_is_refused() -> None:
    refusal(lambda: webhook_receiver(secret="s3cret")(coroutine_function))
    refusal(lambda: webhook_receiver(secret=coroutine_function))


def test_async_purge_targets_are_refused(jobs: JobsEnv) -> None:
    refusal(lambda: purge(name="async.purge", targets=coroutine_function))
    sweep = purge(name="async.purge.target", targets=lambda: [PurgeTarget("x_sessions", coroutine_function)])
    enqueued = sweep.enqueue({})
    report = run_jobs(jobs.driver, clock=jobs.clock)
    last = report.last(enqueued.id)
    assert last is not None and last.code == CODE  # read each attempt: refused before any target runs


def test_an_async_task_body_is_refused_at_declaration(jobs: JobsEnv) -> None:
    refusal(lambda: task(cron="0 3 * * *", tz="UTC")(coroutine_function))


def test_an_async_context_factory_is_refused() -> None:
    error = refusal(lambda: context_factory(f"{__name__}.coroutine_function"))
    assert error.meta["path"] == f"{__name__}.coroutine_function"


def test_async_cross_tenant_and_signal_callbacks_are_refused() -> None:
    refusal(lambda: cross_tenant("a report across every org", coroutine_function))
    refusal(lambda: CancelSignal().add_callback(coroutine_function))
