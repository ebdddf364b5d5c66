"""The ambient context a run executes under: the actor (and its org), and ``cross_tenant()``.

Outside any scope (a migration, the admin, a shell) the guard is off. Inside a job run the executor
installs the job's declared tenant: a row of another org is ``X_TENANCY_ACTOR_MISMATCH``, and a
tenant-scoped read in a ``tenant="none"`` job outside :func:`cross_tenant` is
``X_TENANCY_ACTOR_ORG_REQUIRED``.
"""

from __future__ import annotations

import contextvars
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


_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("ultimate_jobs_tenancy", default=None)

_followers: list[Callable[..., None]] = []

UNGUARDED = object()
"""What :func:`guarded_scope_org` answers where the guard is off."""


def follow_scope(follower: Callable[..., None]) -> None:
    """Call ``follower(leaving=…)`` after every scope change (row-level security mirrors the scope into
    the database session). Entering, a follower that raises stops the scope before its block runs."""
    if follower not in _followers:
        _followers.append(follower)


def _enter(scope: _Scope) -> contextvars.Token[_Scope | None]:
    token = _scope.set(scope)
    try:
        for follower in _followers:
            follower(leaving=False)
    except BaseException:
        _leave(token)
        raise
    return token


def _leave(token: contextvars.Token[_Scope | None]) -> None:
    _scope.reset(token)
    for follower in _followers:
        follower(leaving=True)


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
    token = _enter(_Scope(actor))
    try:
        yield actor
    finally:
        _leave(token)


def cross_tenant(reason: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` with the tenant guard lifted — say why; a job that spans tenants says so here.

    >>> cross_tenant("nightly totals across every org", lambda: Order.objects.count())
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InvariantError("cross_tenant(reason, fn): give a non-empty reason", {})
    refuse_async(fn, what=f"cross_tenant({reason[:40]!r}, fn): fn")
    scope = _scope.get()
    actor = scope.actor if scope else Actor()
    token = _enter(_Scope(actor, reason))
    try:
        return fn()
    finally:
        _leave(token)


def check_org(org_id: object, *, model: str) -> None:
    """Refuse a row of ``org_id`` under the ambient scope; no-op outside any scope or across tenants."""
    scope = _scope.get()
    if scope is None or scope.cross_tenant_reason is not None:
        return
    if scope.actor.org_id is None:
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
