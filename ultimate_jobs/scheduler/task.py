"""``@task``: a cron, its required timezone, its catch-up policy, and the entries each occurrence
enqueues — the :class:`TaskHandle`, its descriptor, and :func:`next_task_run`.

A task's body is synchronous by design: ``def name(occurrence_ms) -> [(job, input), …]`` reads no
database, because ``describe()`` projects it into the manifest and a task that reads rows inside
its tick is a task doing work. One job per row is written as ONE fan-out job the task enqueues.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Required, TypedDict, Unpack, get_args

from ..contracts.jobs import Enqueued, EnqueueRequest
from ..core import registry
from ..core.definition import JobHandle
from ..errors import JobDeclarationInvalidError, UltimateError
from ..guards.admission import check_request
from ..guards.sync_only import refuse_async
from .cron import CronSchedule, cron_problem, load_zone

CatchUp = Literal["skip", "run-once", "run-all"]
CATCH_UP_POLICIES: tuple[CatchUp, ...] = get_args(CatchUp)
DEFAULT_MAX_CATCH_UP = 10

Entry = tuple[JobHandle[Any, Any], Any]
TaskBody = Callable[[int], Sequence[Entry]]


class TaskOptions(TypedDict, total=False):
    """The keyword arguments of :func:`task`. ``cron`` and ``tz`` are required."""

    cron: Required[str]
    tz: Required[str]
    catch_up: CatchUp
    max_catch_up: int
    name: str | None


@dataclass(frozen=True, slots=True)
class TaskDescriptor:
    """The manifest row for one task: cron, tz, catch-up, and its jobs in declaration order."""

    kind: Literal["task"]
    name: str
    cron: str
    tz: str
    catch_up: CatchUp
    max_catch_up: int
    jobs: tuple[str, ...]
    origin: str

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "cron": self.cron,
            "tz": self.tz,
            "catch_up": self.catch_up,
            "max_catch_up": self.max_catch_up,
            "jobs": list(self.jobs),
            "origin": self.origin,
        }


@dataclass(frozen=True, slots=True)
class RefusedEntry:
    """An entry of one occurrence that no driver can store: its job, its place in the body's answer, and
    the coded refusal (``X_JOB_REQUEST_INVALID``, ``X_VALIDATION``, ``X_JOB_DECLARATION_INVALID``…)."""

    job: str
    index: int
    error: UltimateError


class TaskHandle:
    """A declared task: its entries for an occurrence, a manual fire, its descriptor, its next run.

    >>> nightly_digest.entries(occurrence_ms)      # [(send_digest, {...})]
    >>> nightly_digest.enqueue()                   # fire every entry now: one Enqueued per entry
    >>> nightly_digest.describe().as_dict()        # {"kind": "task", "cron": "0 3 * * *", ...}
    """

    kind = "task"

    def __init__(
        self,
        fn: TaskBody,
        *,
        name: str,
        explicit_name: bool,
        cron: str,
        tz: str,
        schedule: CronSchedule,
        catch_up: CatchUp,
        max_catch_up: int,
    ) -> None:
        self.fn = fn
        self.name = name
        self.explicit_name = explicit_name
        self.cron = cron
        self.tz = tz
        self.schedule = schedule
        self.catch_up: CatchUp = catch_up
        self.max_catch_up = max_catch_up
        self.origin = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', name)}"
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<TaskHandle {self.name} cron={self.cron!r} tz={self.tz}>"

    def entries(self, occurrence_ms: int | None = None) -> list[Entry]:
        """The declared ``(job, input)`` pairs for one occurrence (now when none is given). Synchronous
        and side-effect free: this is what ``describe()`` and every fire read."""
        occurrence = occurrence_ms if occurrence_ms is not None else _now_ms()
        answered = self.fn(occurrence)
        if isinstance(answered, str | bytes) or not isinstance(answered, Sequence):
            raise self._bad_entries(f"answered {type(answered).__name__}")
        entries: list[Entry] = []
        for index, entry in enumerate(answered):
            if not isinstance(entry, tuple | list) or len(entry) != 2 or not isinstance(entry[0], JobHandle):
                raise self._bad_entries(f"entry {index} is {entry!r}")
            entries.append((entry[0], entry[1]))
        return entries

    def _bad_entries(self, why: str) -> JobDeclarationInvalidError:
        return JobDeclarationInvalidError(
            f"task {self.name}: the body must answer a list of (job handle, input) pairs; it {why}",
            {"task": self.name, "field": "body"},
        )

    def requests(self, occurrence_ms: int, *, now_ms: int | None = None) -> list[EnqueueRequest]:
        """The rows one occurrence enqueues: every entry through its job's own ``build_request`` — the
        job's own idempotency key, validation and tenant rules. Not yet admitted: an enqueue passes them
        through the router, whose admission check refuses what no driver can store."""
        return [handle.build_request(value, now_ms=now_ms) for handle, value in self.entries(occurrence_ms)]

    def admit(self, occurrence_ms: int, *, now_ms: int) -> tuple[list[EnqueueRequest], list[RefusedEntry]]:
        """What the scheduler's fire writes for one occurrence — it passes no router, so each entry's
        request goes through :func:`~ultimate_jobs.guards.admission.check_request` here — and the entries refused
        (a cron-built key with a NUL byte, an input its job's model rejects). A refusal is the entry's
        own: the other entries of the occurrence are still admitted."""
        admitted: list[EnqueueRequest] = []
        refused: list[RefusedEntry] = []
        for index, (handle, value) in enumerate(self.entries(occurrence_ms)):
            try:
                request = handle.build_request(value, now_ms=now_ms)
                check_request(request)
            except UltimateError as exc:
                refused.append(RefusedEntry(handle.name, index, exc))
            else:
                admitted.append(request)
        return admitted, refused

    def enqueue(self) -> list[Enqueued]:
        """Fire every declared entry now, one answer per entry. Each row carries its job's own
        idempotency key (over an input built for this instant), so a manual fire and the scheduler's
        fire of an occurrence are distinct rows. Routed like any enqueue (the outbox joins the caller's
        transaction when installed)."""
        from ..core.routing import jobs_router

        now = _now_ms()
        requests = self.requests(now, now_ms=now)
        return jobs_router().enqueue_many(requests) if requests else []

    def next_run(self, after_ms: int | None = None) -> int:
        """The first occurrence strictly after ``after_ms`` (now when none is given), in epoch ms."""
        return self.schedule.next_after(after_ms if after_ms is not None else _now_ms())

    def describe(self) -> TaskDescriptor:
        """The manifest row: cron, tz, catch-up and the job names the next occurrence enqueues, in
        declaration order (read from :meth:`entries`, which touches no database)."""
        names: list[str] = []
        for handle, _ in self.entries(self.next_run()):
            if handle.name not in names:
                names.append(handle.name)
        return TaskDescriptor(
            kind="task",
            name=self.name,
            cron=self.cron,
            tz=self.tz,
            catch_up=self.catch_up,
            max_catch_up=self.max_catch_up,
            jobs=tuple(names),
            origin=self.origin,
        )


def next_task_run(task: TaskHandle, from_ms: int | None = None) -> int:
    """The next fire of ``task`` after ``from_ms`` — the scheduler's own resolver, no scheduler needed.

    >>> next_task_run(nightly_digest, clock.now_ms())
    1767236400000
    """
    return task.next_run(from_ms)


def _now_ms() -> int:
    from ..core.installed import job_clock

    return job_clock().now_ms()


_anonymous = 0


def task(**options: Unpack[TaskOptions]) -> Callable[[TaskBody], TaskHandle]:
    """Declare a cron task over ``def name(occurrence_ms) -> [(job, input), …]``. ``cron`` and ``tz``
    are required; ``tz`` must name an IANA zone (``"Bogota"`` is refused, not run in UTC).

    >>> @task(cron="0 3 * * *", tz="Europe/Paris", catch_up="skip")
    ... def nightly_digest(occurrence_ms: int):
    ...     return [(send_digest, {"occurrence_ms": occurrence_ms})]

    ``catch_up`` decides what a scheduler back from downtime fires: ``"skip"`` (default) the latest
    missed occurrence, ``"run-once"`` the earliest one (then the watermark passes the rest),
    ``"run-all"`` every one, at most ``max_catch_up`` (default 10) per tick. Tasks share the name
    space of jobs: a task and a job on one name is ``X_JOB_DUPLICATE``.
    """
    known = set(TaskOptions.__annotations__)
    unknown = set(options) - known
    if unknown:
        raise JobDeclarationInvalidError(
            f"task(): unknown options {sorted(unknown)}; known: {sorted(known)}", {"field": sorted(unknown)[0]}
        )

    def declare(fn: TaskBody) -> TaskHandle:
        global _anonymous
        if not callable(fn):
            raise JobDeclarationInvalidError("task(): decorate a function of the occurrence's epoch ms", {})
        refuse_async(fn, what=f"task {getattr(fn, '__name__', '?')}: the body", meta={"field": "body"})
        explicit = options.get("name")
        if explicit is not None and (not isinstance(explicit, str) or not explicit.strip()):
            raise JobDeclarationInvalidError(
                f"task(): name must be a non-empty string, got {explicit!r}", {"field": "name"}
            )
        derived = getattr(fn, "__name__", None)
        if derived == "<lambda>" or not derived:
            _anonymous += 1
            derived = f"anonymous-task-{_anonymous}"
        handle = _build(fn, explicit or derived, explicit is not None, options)
        registry.register(handle)
        return handle

    return declare


def _build(fn: TaskBody, name: str, explicit: bool, options: TaskOptions) -> TaskHandle:
    def bad(field: str, why: str) -> JobDeclarationInvalidError:
        return JobDeclarationInvalidError(f"task {name}: {field} {why}", {"task": name, "field": field})

    cron = options.get("cron")
    problem = cron_problem(cron)
    if problem is not None:
        raise bad("cron", f"{cron!r} {problem}")
    assert isinstance(cron, str)
    tz = options.get("tz")
    if tz is None:
        raise bad("tz", "is required — a cron without a timezone is a bug; write tz='UTC' or tz='Europe/Paris'")
    zone = load_zone(tz)
    if zone is None:
        raise bad(
            "tz",
            f"{tz!r} is not an IANA timezone; write the full key, e.g. 'America/Bogota' — an unknown zone is "
            "refused rather than run in UTC",
        )
    assert isinstance(tz, str)
    catch_up = options.get("catch_up", "skip")
    if catch_up not in CATCH_UP_POLICIES:
        raise bad("catch_up", f"must be one of {CATCH_UP_POLICIES}, got {catch_up!r}")
    max_catch_up = options.get("max_catch_up", DEFAULT_MAX_CATCH_UP)
    if (
        isinstance(max_catch_up, bool)
        or not isinstance(max_catch_up, int | float)
        or not math.isfinite(max_catch_up)
        or max_catch_up != int(max_catch_up)
        or max_catch_up < 1
    ):
        raise bad("max_catch_up", f"must be a whole number >= 1, got {max_catch_up!r}")
    try:
        parameters = len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        parameters = 1
    if parameters != 1:
        raise bad("body", "must take exactly one argument, the occurrence's epoch ms")
    return TaskHandle(
        fn,
        name=name,
        explicit_name=explicit,
        cron=cron,
        tz=tz,
        schedule=CronSchedule(cron, zone),
        catch_up=catch_up,
        max_catch_up=int(max_catch_up),
    )
