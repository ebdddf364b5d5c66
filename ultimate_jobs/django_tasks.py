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

The job name of a row is the task's ``module_path``, its input ``{"args": [...], "kwargs": {...}, "task":
{...}}`` (the task as enqueued: backend alias, enqueue time, ``run_after``). Each attempt writes the step
``start:<n>`` before the function runs and ``error:<n>`` when it raises; the return value, when JSON, is
the step ``return``. ``get_result`` reads the result back from the row and these steps, which retention
removes with the row. The worker sends ``task_started`` before each attempt's function and
``task_finished`` once the run has ended, as Django's backends do.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from traceback import format_exception
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils.module_loading import import_string

from .contracts.jobs import EnqueueRequest, StepRecord
from .contracts.operator import JobRecord
from .contracts.protocol import OperatorStore
from .core import registry
from .core.definition import JobHandle
from .core.installed import job_clock, job_driver
from .core.logs import log_event
from .core.outcomes import Settled
from .core.retry import RetryPolicy, retry_policy
from .core.run import JobRun
from .defaults import DEFAULT_EVENT_POLL_MS
from .errors import InputNotJsonError, InvariantError, NotImplementedOnDriverError, UltimateError
from .guards.org_boundary import check_job_org

if TYPE_CHECKING:  # mypy reads the typed backport; Django 6's module has the same names and shapes
    from django_tasks import TaskResult
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResultStatus
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:
    try:  # Django 6.0 and later
        from django.tasks import TaskResult
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskContext, TaskError, TaskResultStatus
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json
    except ImportError:  # Django 5.2 with the django-tasks backport
        from django_tasks import TaskResult
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResultStatus
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

__all__ = ["BACKEND_PATH", "JobsBackend", "enqueue_key", "task_queues"]

BACKEND_PATH = "ultimate_jobs.django_tasks.JobsBackend"
RETURN_STEP = "return"
START_STEP = "start:"
"""``start:<attempt>``, written as an attempt calls the function: ``{"worker": id, "at_ms": instant}``. A row
claimed ahead (in a worker's buffer) has none for its attempt yet, so it reads READY, not RUNNING."""
ERROR_STEP = "error:"
"""``error:<attempt>``, written when the function raised: ``{"class": path, "traceback": text}``, one per
attempt, as Django's ``errors`` holds "the errors raised as part of each execution"."""
TASK_KEY = "task"
"""The input's record of the task as enqueued: its backend alias, ``enqueued_at_ms`` and ``run_after``."""
KEY_PREFIX = "django-task:"
CHECK_TASK_QUEUES_ANY = "X_SETTINGS_TASK_QUEUES_ANY"
OPTION_KEYS = frozenset({"RETRY", "TENANT", "IDEMPOTENCY_KEY"})

KeyReader = Callable[[Any, tuple[Any, ...], dict[str, Any]], "str | None"]

_named_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("ultimate_jobs_task_key", default=None)

logger = logging.getLogger("ultimate_jobs")

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

    def check(self, **kwargs: Any) -> Iterable[Any]:
        """Django's system check of the backend (``manage.py check``): a warning for ``QUEUES: []``, which
        Django reads as "any queue name" but which names none a worker could serve."""
        from django.core import checks

        if not self.queues:
            yield checks.Warning(
                f"TASKS[{self.alias!r}] sets QUEUES to [] (any queue name): a jobs_worker started without "
                "--queues serves the queues it can name, and this backend names none beyond 'default'",
                hint="List the queue names in QUEUES, or start the workers with --queues naming them",
                obj=f"TASKS[{self.alias!r}]",
                id=f"ultimate_jobs.{CHECK_TASK_QUEUES_ANY}",
            )

    # -- enqueue ---------------------------------------------------------------------------------

    def _request(self, task: Task[..., Any], args: Iterable[Any], kwargs: Mapping[str, Any]) -> EnqueueRequest:
        handle = handle_for(task, self)
        call_args, call_kwargs = _json_arguments(task, args, kwargs)
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
        enqueued: dict[str, Any] = {"backend": task.backend, "enqueued_at_ms": job_clock().now_ms()}
        if task.run_after is not None:
            enqueued["run_after"] = task.run_after.isoformat()
        payload: dict[str, Any] = {"args": list(call_args), "kwargs": call_kwargs, TASK_KEY: enqueued}
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
        its ``TaskResult``, READY: the result :meth:`get_result` reads back from the row. Arguments must be
        JSON (``X_VALIDATION``, a ``TypeError`` too, otherwise)."""
        from .core.routing import jobs_router

        self.validate_task(task)
        request = self._request(task, args, kwargs)
        enqueued = jobs_router().enqueue(request)
        if enqueued.deduped:  # a live run under the named key answered: its result, once its row is readable
            try:
                return self.get_result(enqueued.id)
            except TaskResultDoesNotExist:  # staged in the outbox, not yet published
                pass
        result = self._ready(task, request, enqueued.id)
        if not enqueued.deduped:
            task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task[..., Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """:meth:`enqueue` from async code (``await my_task.aenqueue(...)``), without blocking the event
        loop: as ``handle.aenqueue`` does, the row is written from the loop on the Postgres driver, and on
        the caller's thread (``sync_to_async(thread_sensitive=True)``) when sync code called in — so async
        code entered with ``async_to_sync`` from a sync function holding ``transaction.atomic()`` stages the
        row in that transaction, as :meth:`enqueue` does there. With ``OPTIONS["TENANT"]`` or
        ``OPTIONS["IDEMPOTENCY_KEY"]`` set, the whole enqueue runs on that thread (the app's functions may
        read the database)."""
        from .core.routing import aenqueue_many, jobs_router

        if self.tenant_reader is not None or self.key_reader is not None:
            return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)
        self.validate_task(task)
        request = self._request(task, args, kwargs)
        (enqueued,) = await aenqueue_many(jobs_router(), [request])
        if enqueued.deduped:
            try:
                return await sync_to_async(self.get_result, thread_sensitive=True)(enqueued.id)
            except TaskResultDoesNotExist:
                pass
        result = self._ready(task, request, enqueued.id)
        if not enqueued.deduped:
            await task_enqueued.asend(type(self), task_result=result)
        return result

    def _ready(self, task: Task[..., Any], request: EnqueueRequest, job_id: str) -> TaskResult[Any]:
        """The READY result of a row just written for ``task``."""
        return TaskResult(
            task=task,
            id=job_id,
            status=TaskResultStatus.READY,
            enqueued_at=_instant(request.input[TASK_KEY]["enqueued_at_ms"]),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(request.input["args"]),
            kwargs=dict(request.input["kwargs"]),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    # -- results ---------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The task's result read from its row and its steps: status, each attempt's error, the return
        value once SUCCESSFUL. ``TaskResultDoesNotExist`` when no row has that id (never enqueued, or purged
        by retention) or the row is a ``@job``'s, not a Django task's. Inside a run, a result of another
        org's task is ``X_TENANCY_ACTOR_MISMATCH`` (:mod:`ultimate_jobs.guards.org_boundary`)."""
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
        steps = surface.steps(job_id) if record.attempts else []
        return result_of(task, record, steps, alias=self.alias)


def result_of(task: Task[..., Any], record: JobRecord, steps: Iterable[StepRecord], *, alias: str) -> TaskResult[Any]:
    """The ``TaskResult`` of a task's row and its steps, as backend ``alias`` answers it.

    - ``task`` is the task as it was enqueued (its backend, queue, priority and ``run_after``);
    - RUNNING while the row is ``running`` and its attempt has started (``start:<attempt>``), else READY;
    - ``worker_ids``, ``started_at`` and ``last_attempted_at`` come from the attempts' start steps, and
      ``errors`` from their error steps; an attempt that ended outside the function (its timeout, a lease
      that lapsed) adds the row's stored error, named by its code's class.
    """
    by_name = {s.name: s for s in steps if s.status == "done"}
    starts = _by_attempt(by_name, START_STEP)
    returned = by_name.get(RETURN_STEP)
    status = _STATUS[record.state]
    if status == "RUNNING" and f"{START_STEP}{record.attempts}" not in by_name:
        status = "READY"  # claimed ahead: held in a worker's buffer, its function not called yet
    if starts or returned is None:
        worker_ids = [str(start.get("worker", "")) for start in starts]
        started = [_instant(start["at_ms"]) for start in starts]
    else:  # a row finished before attempts wrote start steps
        worker_ids = [record.worker_id or ""] * record.attempts
        started = [_instant(returned.started_at_ms)] if returned is not None else []
    meta = record.input.get(TASK_KEY) or {}
    result: TaskResult[Any] = TaskResult(
        task=_as_enqueued(task, record, meta),
        id=record.id,
        status=TaskResultStatus[status],
        enqueued_at=_instant(meta.get("enqueued_at_ms", record.created_at_ms)),
        started_at=started[0] if started else None,
        finished_at=_instant(record.finished_at_ms) if record.finished_at_ms is not None else None,
        last_attempted_at=started[-1] if started else None,
        args=list(record.input.get("args", [])),
        kwargs=dict(record.input.get("kwargs", {})),
        backend=alias,
        errors=_errors(record, by_name),
        worker_ids=worker_ids,
    )
    if returned is not None:
        object.__setattr__(result, "_return_value", returned.output)
    return result


def _by_attempt(by_name: Mapping[str, StepRecord], prefix: str) -> list[Mapping[str, Any]]:
    """The outputs of the steps ``<prefix><attempt>``, in attempt order."""
    numbered = sorted(
        (int(name[len(prefix) :]), step.output)
        for name, step in by_name.items()
        if name.startswith(prefix) and name[len(prefix) :].isdigit() and isinstance(step.output, Mapping)
    )
    return [output for _, output in numbered]


def _errors(record: JobRecord, by_name: Mapping[str, StepRecord]) -> list[TaskError]:
    errors = [
        TaskError(exception_class_path=str(e["class"]), traceback=str(e["traceback"]))
        for e in _by_attempt(by_name, ERROR_STEP)
    ]
    failed_outside = record.state in ("failed", "dead", "cancelled") and f"{ERROR_STEP}{record.attempts}" not in by_name
    if record.last_error and (failed_outside or not errors):
        errors.append(TaskError(exception_class_path=_class_of_code(record.last_code), traceback=record.last_error))
    return errors


def _class_of_code(code: str | None) -> str:
    """The class path of the error ultimate_jobs raises with ``code`` (``builtins.Exception`` for none)."""
    from . import errors

    for found in vars(errors).values():
        if isinstance(found, type) and issubclass(found, errors.CodedError) and found.default_code == code:
            return f"{found.__module__}.{found.__qualname__}"
    return "builtins.Exception"


def _as_enqueued(task: Task[..., Any], record: JobRecord, meta: Mapping[str, Any]) -> Task[..., Any]:
    """``task`` as it was enqueued: the backend alias, ``run_after``, queue and priority of the row."""
    configured = getattr(settings, "TASKS", None) or {}
    backend = meta.get("backend")
    run_after = meta.get("run_after")
    return dataclasses.replace(
        task,
        backend=backend if isinstance(backend, str) and backend in configured else task.backend,
        queue_name=record.queue,
        priority=record.priority,
        run_after=datetime.fromisoformat(run_after) if isinstance(run_after, str) else None,
    )


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _json_arguments(task: Task[..., Any], args: Iterable[Any], kwargs: Mapping[str, Any]) -> tuple[Any, Any]:
    """The arguments as Django normalises them (tuples as lists, UTF-8 bytes as text), or
    ``InputNotJsonError`` — ``X_VALIDATION``, and a ``TypeError`` as Django's own refusal is."""
    try:
        return normalize_json(list(args)), normalize_json(dict(kwargs))
    except RecursionError:  # nested deeper than Python recurses: the enqueue's admission refuses it, coded
        return list(args), dict(kwargs)
    except (TypeError, ValueError) as exc:
        raise InputNotJsonError(
            f"{task.module_path}: the arguments are not JSON ({exc}); pass ids, text and numbers, not objects",
            {"task": task.module_path},
        ) from exc


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
        on_settled=_finished,
    )
    handle.origin = name
    registry.register(handle)
    return handle


def _call(task: Task[..., Any], run: JobRun[dict[str, Any]]) -> Any:
    """One attempt of a Django task, as Django's own backends run one: the attempt's start is recorded
    (``start:<attempt>``), ``task_started`` is sent with the RUNNING result (the one a ``takes_context``
    task gets), then the function is called; what it raises is recorded (``error:<attempt>``, with the
    class and traceback Django's backends keep) and raised on, for the retry policy to judge."""
    args = list(run.input.get("args", []))
    kwargs = dict(run.input.get("kwargs", {}))
    record = _surface_for(task).get(run.job_id)
    if record is None:  # its own row, while it runs: only an operator's remove between claim and now
        raise TaskResultDoesNotExist(f"{task.module_path}: the row {run.job_id} was removed before its attempt began")
    start = {"worker": record.worker_id or "", "at_ms": job_clock().now_ms()}
    run.step.run(f"{START_STEP}{run.attempt}", lambda: start)
    running = result_of(task, record, run.step.completed.values(), alias=_alias_of(task, record))
    _send(task_started, running)

    def call() -> Any:
        if task.takes_context:
            return normalize_json(task.call(TaskContext(task_result=running), *args, **kwargs))
        # as Django's own backends: a value JSON cannot hold (a set, an object) fails the attempt (TypeError)
        return normalize_json(task.call(*args, **kwargs))

    try:
        return run.step.run(RETURN_STEP, call)
    except Exception as exc:
        kind = type(exc)
        error = {"class": f"{kind.__module__}.{kind.__qualname__}", "traceback": "".join(format_exception(exc))}
        # a step refused (the attempt was cancelled, its lease lost): the error is still the function's
        with contextlib.suppress(UltimateError):
            run.step.run(f"{ERROR_STEP}{run.attempt}", lambda: error)
        raise


def _finished(settled: Settled) -> None:
    """The ``on_settled`` of a Django task's handle: once its run has ended for good and the settle has
    landed, ``task_finished`` is sent with the result read back (SUCCESSFUL or FAILED)."""
    task = _task_at(settled.name)
    if task is None:
        return
    surface = _surface_for(task)
    record = surface.get(settled.job_id)
    if record is not None:
        _send(task_finished, result_of(task, record, surface.steps(record.id), alias=_alias_of(task, record)))


def _surface_for(task: Task[..., Any]) -> OperatorStore:
    """The driver's operator store, which a Django task's result is read from."""
    surface = job_driver().operator
    if surface is None:
        raise NotImplementedOnDriverError(
            f"{task.module_path}: the {job_driver().name} driver cannot read a row back, which a Django "
            "task's result needs; use a driver with an operator store",
            {"task": task.module_path},
        )
    return surface


def _alias_of(task: Task[..., Any], record: JobRecord) -> str:
    """The backend alias the row was enqueued through (the task's declared one for an older row)."""
    alias = (record.input.get(TASK_KEY) or {}).get("backend")
    return alias if isinstance(alias, str) and alias in (getattr(settings, "TASKS", None) or {}) else task.backend


def _send(signal: Any, result: TaskResult[Any]) -> None:
    """Send one of Django's task signals from the backend's class, as Django's backends do; a receiver
    that raises is logged (``jobs.task-signal.failed``) and the run goes on."""
    sender = type(result.task.get_backend())
    for receiver, answer in signal.send_robust(sender, task_result=result):
        if isinstance(answer, Exception):
            log_event(
                logging.ERROR,
                "jobs.task-signal.failed",
                job_id=result.id,
                name=result.task.module_path,
                receiver=getattr(receiver, "__qualname__", repr(receiver)),
                error=repr(answer),
            )


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
    """The queues every ``JobsBackend`` in ``settings.TASKS`` names (``QUEUES``, or ``default`` for a
    backend that names none): a worker started without ``--queues`` serves them too. ``QUEUES: []``
    allows any queue name and names none, so it adds only ``default`` (its system check warns)."""
    configured = getattr(settings, "TASKS", None) or {}
    names: set[str] = set()
    for params in configured.values():
        if isinstance(params, Mapping) and params.get("BACKEND") == BACKEND_PATH:
            names |= set(params.get("QUEUES") or ["default"])
    return names


TASKS_SOURCE = registry.Source("django.tasks", resolve=handle_for_name, queues=task_queues)
"""The registry's source for Django tasks: the app adds it at start-up (``AppConfig.ready``)."""
