"""The same behaviours of ``django.tasks``, asserted by the same test body against Django's own
``ImmediateBackend`` (the ``reference`` alias) and our ``JobsBackend`` (the ``jobs`` alias, its rows run by
``run_jobs``), on the memory driver and on Postgres: a difference from Django fails one side only.

The tasks are declared on the ``default`` backend; each test enqueues them through
``.using(backend=side.alias)``, as an app that routes a task to another backend does. Where a backend lacks
a capability (``get_result``, ``run_after`` on the reference), the test asks the flag as Django's docs
tell callers to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import AnyJobsEnv
from tests.djtasks import tasks
from ultimate_jobs.testing import run_jobs

try:
    from django.tasks import TaskResult, TaskResultStatus, task_backends
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskResult, TaskResultStatus, task_backends  # type: ignore[no-redef]
    from django_tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[no-redef]

QUEUES = ["default", "tasks-low", "compat"]


@dataclass
class Side:
    """One backend under test: its alias, and how what was enqueued gets run (nothing for the reference,
    which runs a task inside ``enqueue``)."""

    alias: str
    drain: Callable[[], object]

    @property
    def backend(self) -> Any:
        return task_backends[self.alias]

    def task(self, declared: Any, **using: Any) -> Any:
        return declared.using(backend=self.alias, **using)

    def settle(self, result: TaskResult[Any]) -> TaskResult[Any]:
        """``result`` once its task has run: the reference's is already; ours is refreshed from its row."""
        self.drain()
        if self.backend.supports_get_result:
            result.refresh()
        return result

    def run(self, declared: Any, *args: Any, **kwargs: Any) -> TaskResult[Any]:
        return self.settle(self.task(declared).enqueue(*args, **kwargs))


@pytest.fixture(params=["reference", "jobs"])
def side(request: pytest.FixtureRequest, any_jobs: AnyJobsEnv) -> Iterator[Side]:
    if request.param == "reference":
        yield Side("reference", drain=lambda: None)
    else:
        yield Side("jobs", drain=lambda: run_jobs(any_jobs.driver, clock=any_jobs.clock, queues=QUEUES))
    tasks.CALLS.clear()


@pytest.fixture
def signals() -> Iterator[list[tuple[str, type, str]]]:
    """Every task signal sent, as (signal, sender, the result's status then)."""
    sent: list[tuple[str, type, str]] = []
    receivers = {}
    for name, signal in (("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished)):

        def receiver(sender: type, task_result: TaskResult[Any], _name: str = name, **kwargs: Any) -> None:
            sent.append((_name, sender, str(task_result.status)))

        signal.connect(receiver, weak=False)
        receivers[signal] = receiver
    yield sent
    for signal, receiver in receivers.items():
        signal.disconnect(receiver)


def test_a_result_keeps_the_task_it_was_enqueued_for(side: Side) -> None:
    """Django: ``TaskResult.task`` is "the Task the result was enqueued for" — its backend, queue and
    priority when enqueued through ``.using(...)`` (issue 43, item 1)."""
    routed = side.task(tasks.add, queue_name="compat", priority=7)
    result = side.settle(routed.enqueue(1, 2))
    assert (result.task, result.status, result.return_value) == (routed, TaskResultStatus.SUCCESSFUL, 3)
    if side.backend.supports_get_result:
        assert side.backend.get_result(result.id).task == routed
    if side.backend.supports_defer:
        later = routed.using(run_after=datetime.now(UTC).replace(microsecond=123456) + timedelta(hours=1))
        assert side.backend.get_result(later.enqueue(3, 4).id).task == later  # run_after to the microsecond


def test_an_error_names_the_exceptions_class_and_reads_as_python_prints_it(side: Side) -> None:
    """The class path is the exception's type, whatever its message's last line looks like; the traceback is
    ``format_exception``'s text, ending ``"<Class>: <message>\\n"`` and its notes (issue 43, items 2, 3)."""
    result = side.run(tasks.noted_failure)
    assert result.status == TaskResultStatus.FAILED
    error = result.errors[-1]
    assert error.exception_class_path == "tests.djtasks.tasks.PaymentDeclined"
    assert error.exception_class is tasks.PaymentDeclined
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert error.traceback.endswith(
        "tests.djtasks.tasks.PaymentDeclined: declined\nNote: card expired\nhint: retry later\n"
    )


def test_errors_holds_the_error_of_each_attempt(side: Side) -> None:
    """Django: ``errors`` are "raised as part of each execution": one per attempt (issue 43, item 9)."""
    result = side.run(tasks.decline, "o-1")
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == result.attempts >= 1
    assert {e.exception_class_path for e in result.errors} == {"tests.djtasks.tasks.PaymentDeclined"}


def test_the_enqueued_result_is_the_stored_one_and_refresh_keeps_it(side: Side) -> None:
    """``enqueue()``'s result equals ``get_result()``'s, before and after the run, and a ``refresh()`` that
    finds nothing new changes nothing (issue 43, item 4)."""
    result = side.task(tasks.add).enqueue(2, 2)
    if side.backend.supports_get_result:
        assert result == side.backend.get_result(result.id)
    side.settle(result)
    assert result.return_value == 4
    if side.backend.supports_get_result:
        stored = side.backend.get_result(result.id)
        assert result == stored
        result.refresh()
        assert result == stored


def test_the_running_result_a_task_sees_is_the_one_stored(side: Side) -> None:
    """Inside a run, ``context.task_result`` is RUNNING, with the enqueue time and the workers the stored
    result names (issue 43, items 4 and 7)."""
    result = side.run(tasks.reports_context)
    seen = result.return_value
    assert seen is not None and result.enqueued_at is not None
    assert seen == {
        "status": "RUNNING",
        "enqueued_at": result.enqueued_at.isoformat(),
        "worker_ids": result.worker_ids,
    }


def test_arguments_json_cannot_hold_raise_type_error(side: Side) -> None:
    """Django refuses such arguments with ``TypeError``; so does ours (``X_VALIDATION`` too) (issue 43, item 5)."""
    with pytest.raises(TypeError):
        side.task(tasks.add).enqueue(datetime.now(UTC), 1)
    assert tasks.CALLS == []


def test_the_task_signals_are_sent_from_the_backends_class(side: Side, signals: list[tuple[str, type, str]]) -> None:
    """``task_enqueued`` READY, ``task_started`` RUNNING before the function, ``task_finished`` once the run
    has ended, each with the backend's class as sender (issue 43, items 7, 8)."""
    sender = type(side.backend)
    side.run(tasks.add, 1, 1)
    assert signals == [
        ("enqueued", sender, "READY"),
        ("started", sender, "RUNNING"),
        ("finished", sender, "SUCCESSFUL"),
    ]
    signals.clear()
    failed = side.run(tasks.decline, "o-2")
    assert signals == [
        ("enqueued", sender, "READY"),
        *[("started", sender, "RUNNING")] * failed.attempts,
        ("finished", sender, "FAILED"),
    ]
