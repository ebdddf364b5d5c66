"""The ambient context a run executes under: the actor (and its org), and ``cross_tenant()``.

Outside any scope (a migration, the admin, a shell) the guard is off. Inside a job run the executor
installs the job's declared tenant: a row of another org is ``X_TENANCY_ACTOR_MISMATCH``, and a
tenant-scoped read in a ``tenant="none"`` job outside :func:`cross_tenant` is
``X_TENANCY_ACTOR_ORG_REQUIRED``.

The scope lives in a context variable, so it follows the code wherever ``contextvars`` carry it: into
``sync_to_async`` and ``async_to_sync`` (asgiref copies the context both ways), asyncio tasks and
``asyncio.to_thread``. A ``threading.Thread`` starts with an empty context; one started inside a scope
would otherwise run "outside any scope", with the guard off. So, once :func:`start_threads_with_no_org`
is on (the tenancy guard turns it on when a tenant-scoped model is installed), a thread started inside
any scope starts as a run with no org: its tenant-scoped reads are ``X_TENANCY_ACTOR_ORG_REQUIRED`` and,
on Postgres, row-level security shows it no scoped row, until it installs a scope itself (run the
thread's work in ``contextvars.copy_context().run``, or under ``acting_as``).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from ..errors import InvariantError, TenancyActorMismatchError, TenancyActorOrgRequiredError
from ..guards.sync_only import refuse_async

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: an id for attribution and the org (tenant) the work is under. ``org_id=None`` is no org."""

    id: str | None = None
    org_id: str | None = None


@dataclass(frozen=True, slots=True)
class _Scope:
    actor: Actor
    cross_tenant_reason: str | None = None
    thread_started_in_scope: bool = False


_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("ultimate_jobs_tenancy", default=None)

UNGUARDED = object()
"""What :func:`guarded_scope_org` answers where the guard is off."""

_THREAD_WITH_NO_ORG = _Scope(Actor(), thread_started_in_scope=True)
"""The scope a thread started inside another scope begins with: a run with no org."""

_thread_start = threading.Thread.start
"""``threading.Thread.start`` as the standard library defines it."""


def start_threads_with_no_org() -> None:
    """From now on, a ``threading.Thread`` started inside a scope starts as a run with no org (see the
    module's docstring) instead of outside any scope. Idempotent.

    ``Thread.start`` is wrapped (Python 3.11 raises no audit event a hook could catch a thread start
    with): in the starting thread, while its scope is known, the new thread's ``run`` is wrapped so that
    the thread's own context begins with no org. A context copied into the thread later (asgiref's
    executor runs each call in the caller's context) still wins.
    """
    if threading.Thread.start is not _start_with_no_org:
        threading.Thread.start = _start_with_no_org  # type: ignore[method-assign, assignment]


def _start_with_no_org(thread: threading.Thread) -> None:
    if _scope.get() is not None:
        run = thread.run

        def run_with_no_org() -> None:
            _scope.set(_THREAD_WITH_NO_ORG)
            run()

        thread.run = run_with_no_org  # type: ignore[method-assign]
    _thread_start(thread)


def current_actor() -> Actor | None:
    """The ambient actor, or ``None`` outside any scope."""
    scope = _scope.get()
    return scope.actor if scope else None


def current_tenant() -> str | None:
    """The ambient org id (``None`` outside a scope or under ``tenant="none"``)."""
    scope = _scope.get()
    return scope.actor.org_id if scope else None


@contextmanager
def acting_as(actor: Actor) -> Iterator[Actor]:
    """Install ``actor`` as the ambient actor for the block (the executor does this around a body)."""
    token = enter_scope(actor)
    try:
        yield actor
    finally:
        leave_scope(token)


def enter_scope(actor: Actor) -> contextvars.Token[_Scope | None]:
    """:func:`acting_as`'s entry as a call (an async attempt's hot path): pass its answer to
    :func:`leave_scope`."""
    return _scope.set(_Scope(actor))


def leave_scope(token: contextvars.Token[_Scope | None]) -> None:
    """Undo :func:`enter_scope`."""
    _scope.reset(token)


def cross_tenant(reason: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` with the tenant guard lifted — say why; a job that spans tenants says so here.

    >>> cross_tenant("nightly totals across every org", lambda: Order.objects.count())
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InvariantError("cross_tenant(reason, fn): give a non-empty reason", {})
    refuse_async(fn, what=f"cross_tenant({reason[:40]!r}, fn): fn")
    scope = _scope.get()
    actor = scope.actor if scope else Actor()
    token = _scope.set(_Scope(actor, reason))
    try:
        return fn()
    finally:
        _scope.reset(token)


def check_org(org_id: object, *, model: str) -> None:
    """Refuse a row of ``org_id`` under the ambient scope; no-op outside any scope or across tenants."""
    scope = _scope.get()
    if scope is None or scope.cross_tenant_reason is not None:
        return
    if scope.actor.org_id is None:
        if scope.thread_started_in_scope:
            raise TenancyActorOrgRequiredError(
                f"{model}: a tenant-scoped read on a thread started inside a run, which carries no org; run the "
                "thread's work in contextvars.copy_context().run(fn) (it then acts under the run's org), or "
                "under acting_as(actor), or say why it spans orgs with cross_tenant(reason, fn)",
                {"model": model, "thread": threading.current_thread().name},
            )
        raise TenancyActorOrgRequiredError(
            f"{model}: a tenant-scoped read ran with no org (tenant='none'); wrap it in cross_tenant(reason, fn)",
            {"model": model},
        )
    if org_id is None or str(org_id) != scope.actor.org_id:
        # never name the other org: the refusal must not tell a run which orgs exist
        raise TenancyActorMismatchError(
            f"{model}: the row belongs to another org than the one this run acts under ({scope.actor.org_id})",
            {"model": model, "actor_org": scope.actor.org_id},
        )


def guarded_org() -> str | None:
    """The org a guarded scope acts under, or ``None`` when the guard is off (outside any scope, or inside
    ``cross_tenant``). A guarded scope with no org raises ``X_TENANCY_ACTOR_ORG_REQUIRED``."""
    scope = _scope.get()
    if scope is None or scope.cross_tenant_reason is not None:
        return None
    if scope.actor.org_id is None:
        check_org(None, model="a tenant-scoped model")
    return scope.actor.org_id


def guarded_scope_org() -> object:
    """The org a guarded scope acts under (``None`` for a run with no org), or :data:`UNGUARDED` outside
    any scope and inside ``cross_tenant`` — never raises."""
    scope = _scope.get()
    if scope is None or scope.cross_tenant_reason is not None:
        return UNGUARDED
    return scope.actor.org_id
