"""``purge()``: a retention sweep declared as a job, one durable step per table it empties.

A store that keeps rows until they expire needs something to call its ``purge_expired``; without a
caller it keeps every row it ever took. ``purge()`` is that caller, a factory over :func:`job`:

- one ``step.run`` per target, so an attempt killed after the first table resumes at the second
  (the steps replay) instead of at the first;
- one clock reading per attempt, handed to every target: a store that compares with time judges
  expiry by the CALLER's clock, never by a database clock a frozen test clock disagrees with;
- the targets are read once per attempt, never captured at declaration: some stores behind them
  are built after the module declaring the sweep is imported;
- two targets under one name are ``X_INVARIANT`` before the first delete (``step.run`` would refuse
  the second only after the first table was already empty).

At least once is safe here: a replayed delete removes rows that are already gone, and a purged row
answers exactly as one that was never there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ..contracts.events import EventBus
from ..core.declare import job
from ..core.definition import JobHandle
from ..core.run import JobRun
from ..errors import InvariantError, JobDeclarationInvalidError
from ..guards.sync_only import refuse_async

DEFAULT_PURGE_CRON = "0 * * * *"
"""Hourly, on the hour: the cron a retention sweep's task fires on
(``@task(cron=DEFAULT_PURGE_CRON, tz="UTC")``). Each pass deletes in bounded batches, so an hour's
growth is what one pass removes."""


class PurgeTargetLike(Protocol):
    """What a purge target is, structurally: a ``name`` (the step it runs under) and
    ``purge_expired(now_ms)``, which deletes what expired by ``now_ms`` and answers how many rows went."""

    @property
    def name(self) -> str: ...

    def purge_expired(self, now_ms: int) -> int: ...


@dataclass(frozen=True, slots=True)
class PurgeTarget:
    """One table a sweep empties: ``purge_expired(now_ms)`` deletes what expired by ``now_ms`` (the
    sweep's one clock reading) and answers the rows removed.

    >>> PurgeTarget("x_sessions", lambda now_ms: Session.objects.filter(expires_ms__lte=now_ms).delete()[0])
    """

    name: str
    purge_expired: Callable[[int], int]


def check_targets(job: str, listed: Iterable[PurgeTargetLike]) -> list[PurgeTargetLike]:
    """The targets of one pass, in order; ``X_INVARIANT`` on a nameless target or on two under one name,
    before any of them runs."""
    targets = list(listed)
    seen: set[str] = set()
    for target in targets:
        name = getattr(target, "name", None)
        if not isinstance(name, str) or not name.strip():
            raise InvariantError(f"{job}: a purge target needs a non-empty name, got {name!r}", {"job": job})
        if not callable(getattr(target, "purge_expired", None)):
            raise InvariantError(f"{job}: purge target {name!r} has no purge_expired(now_ms)", {"job": job})
        refuse_async(target.purge_expired, what=f"{job}: purge target {name!r}", meta={"job": job, "target": name})
        if name in seen:
            raise InvariantError(
                f"{job}: two purge targets are named {name!r}; the name is the step a target runs under, so "
                "give each table its own name",
                {"job": job, "target": name},
            )
        seen.add(name)
    return targets


def _pass(job: str, target: PurgeTargetLike, now_ms: int) -> Callable[[], int]:
    """The step body of one target: its ``purge_expired(now_ms)``, whose answer must be a row count."""

    def run() -> int:
        answer: object = target.purge_expired(now_ms)
        if isinstance(answer, bool) or not isinstance(answer, int) or answer < 0:
            raise InvariantError(
                f"{job}: purge target {target.name!r} answered {answer!r}; purge_expired must answer the rows "
                "it removed",
                {"job": job, "target": target.name},
            )
        return answer

    return run


# -- the event bus as a target ----------------------------------------------------------------

EVENTS_PURGE_TARGET = "x_job_events"


@dataclass(frozen=True, slots=True)
class EventsPurgeTarget:
    """``{name, purge_expired}`` over a bus: the shape every purge target has (structural)."""

    bus: EventBus
    name: str = EVENTS_PURGE_TARGET

    def purge_expired(self, now_ms: int | None = None) -> int:
        """Delete the bus's expired events; answers the rows removed. ``now_ms`` is ignored: the bus
        judges expiry on its own clock (the database's, on Postgres)."""
        return self.bus.purge_expired()


def events_purge_target(bus: EventBus) -> EventsPurgeTarget:
    """The bus as a purge target: ``targets=lambda: [events_purge_target(event_bus())]``.

    >>> events_purge_target(event_bus()).purge_expired()
    0
    """
    return EventsPurgeTarget(bus)


def purge(
    *,
    name: str,
    targets: Callable[[], Iterable[PurgeTargetLike]],
    queue: str = "default",
    retry: Any = None,
) -> JobHandle[Any, dict[str, int]]:
    """Declare a retention sweep: a job whose every pass runs each target's ``purge_expired(now_ms)``
    once, in order, each in its own step, and answers ``{target name: rows removed}``.

    >>> sweep = purge(name="app.purge", targets=lambda: [PurgeTarget("x_sessions", sessions.purge_expired)])
    >>> @task(cron=DEFAULT_PURGE_CRON, tz="UTC")
    ... def app_purge_hourly(occurrence_ms):
    ...     return [(sweep, {})]

    ``targets`` is called at the start of every attempt, never at declaration. A pass is keyed on the
    sweep's name, so a second enqueue while one pass is live joins it.
    """
    if not isinstance(name, str) or not name.strip():
        raise JobDeclarationInvalidError(f"purge(): name must be a non-empty string, got {name!r}", {"field": "name"})
    if not callable(targets):
        raise JobDeclarationInvalidError(
            f"{name}: targets must be a function answering the targets (read once per attempt)",
            {"job": name, "field": "targets"},
        )
    refuse_async(targets, what=f"{name}: targets", meta={"job": name, "field": "targets"})

    def sweep(run: JobRun[Any]) -> dict[str, int]:
        from ..core.installed import job_clock

        listed = check_targets(name, targets())
        now_ms = job_clock().now_ms()
        removed: dict[str, int] = {}
        for target in listed:
            removed[target.name] = run.step.run(target.name, _pass(name, target, now_ms))
        return removed

    sweep.__qualname__ = f"purge[{name}]"
    options: dict[str, Any] = {"name": name, "idempotency_key": lambda _input: name, "tenant": "none", "queue": queue}
    if retry is not None:
        options["retry"] = retry
    return job(**options)(sweep)
