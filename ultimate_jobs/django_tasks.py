"""``JobsBackend``: Django's own task API (``django.tasks``) on this queue.

Configure it as a ``TASKS`` backend, then Django's ``@task`` functions and ``task.enqueue(...)`` /
``aenqueue(...)`` become rows of ``x_jobs``, run by ``jobs_worker`` with its retries, dead letters and
admin; ``get_result(id)`` and ``TaskResult.refresh()`` read the row back. On Django 5.2 the same backend
runs on the ``django-tasks`` backport (``pip install "ultimate-jobs[tasks]"``).

>>> TASKS = {"default": {"BACKEND": "ultimate_jobs.django_tasks.JobsBackend",
...                      "QUEUES": ["default", "emails"],
...                      "OPTIONS": {"RETRY": {"attempts": 3, "backoff": "exponential", "delay": "2s"}}}}

Django's tasks carry neither an idempotency key nor a tenant, and this backend never invents one that
could merge two enqueues:

- the idempotency key is ``django-task:<a fresh uuid>`` per enqueue, so nothing dedupes by accident,
  unless the caller names one for the enqueue (``with enqueue_key("welcome:7"): send_welcome.enqueue(7)``)
  or ``OPTIONS["IDEMPOTENCY_KEY"]`` names a function ``(task, args, kwargs) -> str | None`` that does;
- the tenant is none (``tenant="none"`` of a ``@job``) unless ``OPTIONS["TENANT"]`` names a function
  ``(task, args, kwargs) -> str | None`` that answers the org; the run then acts under that org.

The job name of a row is the task's ``module_path``, its input ``{"args": [...], "kwargs": {...}}``. The
return value, when JSON, is stored as the row's step ``return`` and removed with the row by retention.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils.module_loading import import_string

from .core import registry
from .core.definition import JobHandle
from .core.retry import RetryPolicy, retry_policy
from .core.run import JobRun
from .defaults import DEFAULT_EVENT_POLL_MS
from .drivers.records import EnqueueRequest, JobRecord, StepRecord
from .errors import InvariantError
from .guards.org_boundary import check_job_org

if TYPE_CHECKING:  # mypy reads the typed backport; Django 6's module has the same names and shapes
    from django_tasks import TaskResult
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResultStatus
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued
    from django_tasks.utils import normalize_json
else:
    try:  # Django 6.0 and later
        from django.tasks import TaskResult
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskContext, TaskError, TaskResultStatus
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued
        from django.utils.json import normalize_json
    except ImportError:  # Django 5.2 with the django-tasks backport
        from django_tasks import TaskResult
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResultStatus
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued
        from django_tasks.utils import normalize_json

__all__ = ["BACKEND_PATH", "JobsBackend", "enqueue_key", "task_queues"]

BACKEND_PATH = "ultimate_jobs.django_tasks.JobsBackend"
RETURN_STEP = "return"
KEY_PREFIX = "django-task:"
OPTION_KEYS = frozenset({"RETRY", "TENANT", "IDEMPOTENCY_KEY"})

KeyReader = Callable[[Any, tuple[Any, ...], dict[str, Any]], "str | None"]

_named_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("ultimate_jobs_task_key", default=None)

_STATUS = {
    "ready": "READY",
    "delayed": "READY",
    "suspended": "READY",
    "running": "RUNNING",
    "done": "SUCCESSFUL",
    "failed": "FAILED",
    "dead": "FAILED",
    "cancelled": "FAILED",
}


@contextlib.contextmanager
def enqueue_key(key: str) -> Iterator[str]:
    """Name the idempotency key of the Django task enqueues inside the block: while a job under this
    key is live, another enqueue with it answers that job's result instead of a second row.

    >>> with enqueue_key(f"welcome:{user.pk}"):
    ...     result = send_welcome.enqueue(user.pk)
    """
    if not isinstance(key, str) or not key or len(key) > 512:
        raise InvariantError(
            f"enqueue_key({str(key)[:40]!r}): the key must be a non-empty string of at most 512 characters", {}
        )
    token = _named_key.set(key)
    try:
        yield key
    finally:
        _named_key.reset(token)


def _reader(options: Mapping[str, Any], name: str, alias: str) -> KeyReader | None:
    path = options.get(name)
    if path is None:
        return None
    found = import_string(path) if isinstance(path, str) else path
    if not callable(found):
        raise InvariantError(
            f"TASKS[{alias!r}]['OPTIONS'][{name!r}] = {path!r} is not a function (task, args, kwargs) -> str | None",
            {"backend": alias, "option": name},
        )
    return found  # type: ignore[no-any-return]


class JobsBackend(BaseTaskBackend):
    """A ``django.tasks`` backend whose tasks are rows of ``x_jobs`` run by ``jobs_worker``.

    Capabilities, all true: ``run_after`` (a delayed row), coroutine functions (run through
    ``async_to_sync`` in a worker slot), ``get_result`` from any process, and ``priority`` (a higher
    number is claimed first, the same order as a ``@job``'s ``priority``).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - OPTION_KEYS
        if unknown:
            raise InvariantError(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {sorted(unknown)}; known: {sorted(OPTION_KEYS)}",
                {"backend": alias},
            )
        self.retry: RetryPolicy = retry_policy(self.options.get("RETRY"), job=f"TASKS[{alias!r}]")
        self.tenant_reader = _reader(self.options, "TENANT", alias)
        self.key_reader = _reader(self.options, "IDEMPOTENCY_KEY", alias)

    # -- enqueue ---------------------------------------------------------------------------------

    def _request(self, task: Task[..., Any], args: Iterable[Any], kwargs: Mapping[str, Any]) -> EnqueueRequest:
        handle = handle_for(task, self)
        call_args, call_kwargs = tuple(args), dict(kwargs)
        key = _named_key.get()
        if key is None and self.key_reader is not None:
            key = self.key_reader(task, call_args, call_kwargs)
        if key is None:
            key = f"{KEY_PREFIX}{uuid.uuid4()}"
        tenant = self.tenant_reader(task, call_args, call_kwargs) if self.tenant_reader is not None else None
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise InvariantError(
                f"TASKS[{self.alias!r}]['OPTIONS']['TENANT'] answered {tenant!r} for {task.module_path}; "
                "it must answer an org id (a non-empty string) or None",
                {"backend": self.alias, "task": task.module_path},
            )
        payload: dict[str, Any] = {"args": list(call_args), "kwargs": call_kwargs}
        if tenant is not None:
            payload["tenant"] = tenant
        run_at_ms = int(task.run_after.timestamp() * 1000) if task.run_after is not None else None
        request = handle.build_request(payload, queue=task.queue_name, run_at=run_at_ms)
        return EnqueueRequest(
            name=request.name,
            queue=request.queue,
            input=request.input,
            idempotency_key=key,
            tenant_id=tenant,
            max_attempts=self.retry.attempts,
            priority=task.priority,
            run_at_ms=request.run_at_ms,
            traceparent=request.traceparent,
        )

    def enqueue(self, task: Task[..., Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """Write the task's row (in the caller's transaction when the outbox is installed) and answer
        its ``TaskResult``, READY. Arguments must be JSON (``X_VALIDATION`` otherwise)."""
        from .core.routing import jobs_router

        self.validate_task(task)
        request = self._request(task, args, kwargs)
        enqueued = jobs_router().enqueue(request)
        now = datetime.now(UTC)
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=enqueued.id,
            status=TaskResultStatus.READY,
            enqueued_at=now,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(request.input["args"]),
            kwargs=dict(request.input["kwargs"]),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        if enqueued.deduped:  # a live run under the named key answered: its result, once its row is readable
            try:
                return self.get_result(enqueued.id)
            except TaskResultDoesNotExist:  # staged in the outbox, not yet published
                return result
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task[..., Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """:meth:`enqueue` from async code (``await my_task.aenqueue(...)``), without blocking the event
        loop: it runs on Django's thread-sensitive thread (``sync_to_async(thread_sensitive=True)``), so
        async code entered with ``async_to_sync`` from a sync function holding ``transaction.atomic()``
        stages the row in that transaction, as :meth:`enqueue` does there."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)

    # -- results ---------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The task's result read from its row: status, the last attempt's error, the return value once
        SUCCESSFUL. ``TaskResultDoesNotExist`` when no row has that id (never enqueued, or purged by
        retention) or the row is a ``@job``'s, not a Django task's. Inside a run, a result of another org's
        task is ``X_TENANCY_ACTOR_MISMATCH`` (:mod:`ultimate_jobs.guards.org_boundary`)."""
        from .core.installed import job_driver

        try:
            job_id = str(uuid.UUID(str(result_id)))
        except ValueError:
            raise TaskResultDoesNotExist(f"{result_id!r} is not a task result id") from None
        surface = job_driver().operator
        if surface is None:
            raise TaskResultDoesNotExist(f"the {job_driver().name} driver cannot read results back")
        record = surface.get(job_id)
        if record is None:
            raise TaskResultDoesNotExist(f"no task result {job_id} (never enqueued, or removed by retention)")
        check_job_org(record.tenant_id, job_id=job_id)  # inside a run: the run's org's results only
        task = _task_at(record.name)
        if task is None:
            raise TaskResultDoesNotExist(f"{job_id} is the job {record.name!r}, not a Django task")
        steps = surface.steps(job_id) if record.state == "done" else []
        return self._result_of(task, record, steps)

    def _result_of(self, task: Task[..., Any], record: JobRecord, steps: list[StepRecord]) -> TaskResult[Any]:
        returned = next((s for s in steps if s.name == RETURN_STEP and s.status == "done"), None)
        attempted = _instant(record.updated_at_ms) if record.attempts else None
        result: TaskResult[Any] = TaskResult(
            task=task.using(priority=record.priority, queue_name=record.queue),
            id=record.id,
            status=TaskResultStatus[_STATUS[record.state]],
            enqueued_at=_instant(record.created_at_ms),
            started_at=_instant(returned.started_at_ms) if returned is not None else attempted,
            finished_at=_instant(record.finished_at_ms) if record.finished_at_ms is not None else None,
            last_attempted_at=attempted,
            args=list(record.input.get("args", [])),
            kwargs=dict(record.input.get("kwargs", {})),
            backend=self.alias,
            errors=[_task_error(record.last_error)] if record.last_error else [],
            worker_ids=[record.worker_id or ""] * record.attempts,
        )
        if returned is not None:
            object.__setattr__(result, "_return_value", returned.output)
        return result


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _task_error(text: str) -> TaskError:
    """A stored error as Django's ``TaskError``: the traceback's closing ``module.Class: message`` line
    names the class (a builtin's has no module; a coded error's head ``X_CODE: message`` is not one)."""
    name = "Exception"
    for line in reversed(text.splitlines()[1:]):
        match = _EXCEPTION_LINE.match(line)
        if match is not None:
            name = match.group(1)
            break
    return TaskError(exception_class_path=name if "." in name else f"builtins.{name}", traceback=text)


_EXCEPTION_LINE = re.compile(r"^(?!Traceback\b|During\b)([A-Za-z_][\w.]*)(?::|$)")


def _task_at(path: str) -> Task[..., Any] | None:
    """The Django ``Task`` a row's name points to, or None when it points to none."""
    if "." not in path:
        return None
    try:
        found = import_string(path)
    except ImportError:
        return None
    return found if isinstance(found, Task) else None


# -- the worker's side -----------------------------------------------------------------------------


class TaskJobHandle(JobHandle[dict[str, Any], Any]):
    """The ``JobHandle`` a worker runs a Django task's row with: the row's ``tenant`` (when the backend
    read one) is the run's org; the retry policy is the backend's ``OPTIONS["RETRY"]``."""

    kind = "job"

    def derive_tenant(self, parsed: dict[str, Any]) -> str | None:
        """The org the enqueue stored, or None."""
        tenant = parsed.get("tenant")
        return tenant if isinstance(tenant, str) and tenant else None


def handle_for(task: Task[..., Any], backend: JobsBackend) -> TaskJobHandle:
    """The handle of ``task`` (registered under its ``module_path`` on first use)."""
    name = task.module_path
    seated = registry.lookup(name)
    if isinstance(seated, TaskJobHandle):
        return seated

    def body(run: JobRun[dict[str, Any]]) -> Any:
        return _call(task, run)

    handle = TaskJobHandle(
        body,
        name=name,
        explicit_name=False,
        idempotency_key=lambda i: f"{KEY_PREFIX}{uuid.uuid4()}",
        tenant="none",
        input_model=None,
        retry=backend.retry,
        timeout_ms=None,
        step_timeout_ms=None,
        event_poll_ms=DEFAULT_EVENT_POLL_MS,
        concurrency=None,
        queue=task.queue_name,
        priority=task.priority,
        on_settled=None,
    )
    handle.origin = name
    registry.register(handle)
    return handle


def _call(task: Task[..., Any], run: JobRun[dict[str, Any]]) -> Any:
    args = list(run.input.get("args", []))
    kwargs = dict(run.input.get("kwargs", {}))

    def call() -> Any:
        if task.takes_context:
            running: TaskResult[Any] = TaskResult(
                task=task,
                id=run.job_id,
                status=TaskResultStatus.RUNNING,
                enqueued_at=None,
                started_at=datetime.now(UTC),
                finished_at=None,
                last_attempted_at=datetime.now(UTC),
                args=args,
                kwargs=kwargs,
                backend=task.backend,
                errors=[],
                worker_ids=[f"{socket.gethostname()}-{os.getpid()}"] * run.attempt,
            )
            return normalize_json(task.call(TaskContext(task_result=running), *args, **kwargs))
        # as Django's own backends: a value JSON cannot hold (a set, an object) fails the attempt (TypeError)
        return normalize_json(task.call(*args, **kwargs))

    return run.step.run(RETURN_STEP, call)


def handle_for_name(name: str) -> TaskJobHandle | None:
    """The worker's lookup for a row whose name no ``@job`` holds: a Django task on a ``JobsBackend``
    named by its ``module_path``, or None."""
    if not task_queues():  # no JobsBackend configured: never import what a row names
        return None
    task = _task_at(name)
    if task is None:
        return None
    backend = task.get_backend()
    if not isinstance(backend, JobsBackend):
        return None
    return handle_for(task, backend)


def task_queues() -> set[str]:
    """The queues every ``JobsBackend`` in ``settings.TASKS`` serves (``QUEUES``, or ``default``): a
    worker started without ``--queues`` serves them too."""
    configured = getattr(settings, "TASKS", None) or {}
    names: set[str] = set()
    for params in configured.values():
        if isinstance(params, Mapping) and params.get("BACKEND") == BACKEND_PATH:
            names |= set(params.get("QUEUES") or ["default"])
    return names


TASKS_SOURCE = registry.Source("django.tasks", resolve=handle_for_name, queues=task_queues)
"""The registry's source for Django tasks: the app adds it at start-up (``AppConfig.ready``)."""
