"""Where the watermarks live, and the fire that moves one together with its occurrence's jobs.

The spec's rule: an occurrence fires in ONE statement — the watermark and its jobs move together
(``SchedulerState.fire``), so a crash between them cannot fire it twice. The Postgres state does that
with ``SQL_SCHEDULER_FIRE`` when the driver is the Postgres driver on the same database; the memory
state does the same under one lock. A fire is refused (``fenced``) when the stored watermark is no
longer the one the scheduler read — another scheduler fired first — and held back (``paused``) while
the task is paused.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..drivers.base import EnqueueRequest, JobDriver
from ..drivers.postgres.driver import enqueue_rows
from ..drivers.postgres.executor import Executor, jsonb
from . import sql

FireOutcome = Literal["fired", "paused", "fenced"]


@dataclass(frozen=True, slots=True)
class Fire:
    """One occurrence to fire: the watermark moves from ``previous_ms`` to ``watermark_ms`` and
    ``requests`` are enqueued, or nothing happens."""

    task: str
    previous_ms: int
    watermark_ms: int
    occurrence_ms: int
    requests: Sequence[EnqueueRequest]
    now_ms: int


@dataclass(frozen=True, slots=True)
class FireResult:
    """What a fire did: ``fired`` (``inserted`` rows; a deduped entry inserts none), ``paused`` or
    ``fenced`` (nothing written either way)."""

    outcome: FireOutcome
    inserted: int = 0


class SchedulerState(Protocol):
    """The watermark store the scheduler loads when it starts leading and fires through."""

    durable: bool

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        """Every task's watermark, arming those that have none at ``now_ms`` (arming is not a fire)."""

    def fire(self, fire: Fire, *, driver: JobDriver) -> FireResult:
        """Move the watermark, enqueue the rows and record the fire — together, or not at all."""


class MemorySchedulerState:
    """Watermarks in a dict — for tests and ``jobs_dev`` only: a restarted process forgets them, so
    catch-up has nothing to measure from (it re-arms to now)."""

    durable = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.watermarks: dict[str, int] = {}

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        with self._lock:
            for name in tasks:
                self.watermarks.setdefault(name, now_ms)
            return {name: self.watermarks[name] for name in tasks}

    def fire(self, fire: Fire, *, driver: JobDriver) -> FireResult:
        introspect = driver.introspect
        with self._lock:
            if introspect is not None and fire.task in introspect.paused_tasks():
                return FireResult("paused")
            if self.watermarks.get(fire.task) != fire.previous_ms:
                return FireResult("fenced")
            self.watermarks[fire.task] = fire.watermark_ms
            try:
                answers = driver.enqueue_many(fire.requests) if fire.requests else []
            except BaseException:
                self.watermarks[fire.task] = fire.previous_ms  # all or nothing, as the statement is
                raise
            if introspect is not None:
                introspect.record_task_fire(task=fire.task, occurrence_ms=fire.occurrence_ms)
        return FireResult("fired", sum(1 for a in answers if not a.deduped))


class PostgresSchedulerState:
    """Watermarks in ``x_job_task_watermarks``. Build it with :func:`postgres_scheduler_state`."""

    durable = True

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        names = list(dict.fromkeys(tasks))
        if not names:
            return {}
        rows = self.executor.query(sql.SQL_SCHEDULER_LOAD, {"tasks": names, "now": now_ms})
        found = {row[0]: int(row[1]) for row in rows}
        missing = [name for name in names if name not in found]
        if missing:  # armed by another scheduler after this statement's snapshot was taken
            again = self.executor.query(sql.SQL_SCHEDULER_WATERMARKS, {"tasks": missing})
            found.update({row[0]: int(row[1]) for row in again})
        return found

    def reaches(self, driver: JobDriver) -> bool:
        """Whether one statement can write ``driver``'s job rows: the Postgres driver on this database."""
        from ..drivers.postgres.driver import PostgresDriver

        return isinstance(driver, PostgresDriver) and driver.alias == self.executor.alias

    def fire(self, fire: Fire, *, driver: JobDriver) -> FireResult:
        params: dict[str, Any] = {
            "task": fire.task,
            "previous": fire.previous_ms,
            "watermark": fire.watermark_ms,
            "occurrence": fire.occurrence_ms,
            "now": fire.now_ms,
        }
        if self.reaches(driver):
            params["rows"] = jsonb(enqueue_rows(fire.requests))
            [(moved, paused, inserted, _)] = self.executor.query(sql.SQL_SCHEDULER_FIRE, params)
            return _result(moved, paused, inserted)
        [(moved, paused)] = self.executor.query(sql.SQL_SCHEDULER_ADVANCE, params)
        if not moved:
            return _result(moved, paused, 0)
        answers = driver.enqueue_many(fire.requests) if fire.requests else []
        introspect = driver.introspect
        if introspect is not None:
            introspect.record_task_fire(task=fire.task, occurrence_ms=fire.occurrence_ms)
        return FireResult("fired", sum(1 for a in answers if not a.deduped))


def _result(moved: int, paused: bool, inserted: int) -> FireResult:
    if moved:
        return FireResult("fired", int(inserted))
    return FireResult("paused" if paused else "fenced")


def memory_scheduler_state() -> MemorySchedulerState:
    """Watermarks in process memory: tests and ``jobs_dev`` only."""
    return MemorySchedulerState()


def postgres_scheduler_state(executor: Executor) -> PostgresSchedulerState:
    """The durable watermark store for any real deployment: a redeployed scheduler reads where the one
    it replaced stopped, so catch-up sees the occurrences the gap dropped.

    >>> from ultimate_jobs.drivers.postgres.executor import django_executor
    >>> state = postgres_scheduler_state(django_executor("default"))
    """
    return PostgresSchedulerState(executor)
