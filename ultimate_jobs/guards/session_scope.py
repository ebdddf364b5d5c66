"""The row-level security settings of every database session follow the ambient scope, statement by statement.

The policy of :class:`~ultimate_jobs.guards.row_security.EnableTenantRowSecurity` reads two session
settings. The scope lives in a context variable, which follows the code into other threads
(``sync_to_async``, a pool's thread) and out of them again; a session may serve several threads in turn
(a connection pool hands it from one to the next). So the settings are not set where the scope changes
but where it is used: before each statement, on the connection that runs it.

- Every connection of a database a tenant-scoped model lives on carries an ``execute_wrapper`` (put
  there as it connects). Before a statement it compares the ambient scope with what this library last
  set on the session; only when they differ does it send one ``set_config`` statement first. A run
  that sends no statement (a no-op job) costs nothing; one that does pays one statement on its first,
  and the first statement outside it pays one to widen the session again.
- Outside a transaction the setting is made for the session (``set_config(..., false)``). Inside one it
  is made for that transaction only (``set_config(..., true)``): a rollback, of the transaction or to a
  savepoint, can then never leave the session under a scope this library did not record.
- A session this library has not set (new, or handed over by a pool) is set before its first statement.
  The policy's default, for a session nobody set, is no row at all: a session that escaped this code
  (a pool's reset, a raw connection) fails closed.
- Statements sent on the DB-API connection itself (``connection.connection``) pass no wrapper and run
  under the session's last setting: use ``connection.cursor()``. The library's own statements that skip
  Django's cursor (the Postgres driver's bound statements, which touch no scoped table) still report to
  :func:`observe`, so a transaction they begin is seen.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from psycopg import pq

from ..core.scope import UNGUARDED, guarded_scope_org

__all__ = ["SETTING_ORG", "SETTING_SCOPE", "observe", "scoped_aliases", "uses_other_wrappers"]

SETTING_SCOPE = "ultimate_jobs.tenant_scope"
"""``org`` in a run with an org, ``none`` in a run with no org, ``all`` outside any scope and under
``cross_tenant()``; anything else (unset, empty) is no row."""

SETTING_ORG = "ultimate_jobs.org_id"
"""The org a run acts under, when :data:`SETTING_SCOPE` is ``org``."""

SQL_SET_TENANT = (
    "SELECT set_config('ultimate_jobs.tenant_scope', %s, false), set_config('ultimate_jobs.org_id', %s, false)"
)
"""Set the scope for the session — sent only outside a transaction, where no rollback can revert it."""

SQL_SET_TENANT_LOCAL = (
    "SELECT set_config('ultimate_jobs.tenant_scope', %s, true), set_config('ultimate_jobs.org_id', %s, true)"
)
"""Set the scope for the open transaction only: it ends with the transaction, whatever ends it."""

Setting = tuple[str, str]

ALL: Setting = ("all", "")
"""Outside any scope, and under ``cross_tenant()``: every row."""

NONE: Setting = ("none", "")
"""A run with no org (``tenant="none"``, a thread started inside a run): no scoped row."""

_UNKNOWN: Setting = ("", "")
"""A setting this library cannot vouch for (equal to no desired one, so the next statement sets it)."""

_IDLE = pq.TransactionStatus.IDLE
_INTRANS = pq.TransactionStatus.INTRANS

_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT"


@dataclass(slots=True)
class _Session:
    """What this library last set on one database session."""

    held: Setting = _UNKNOWN
    """The session's own setting (made outside any transaction)."""

    local: Setting | None = None
    """The setting made for the open transaction, ``None`` when none was."""


_ATTR = "_ultimate_jobs_session"


def desired_setting() -> Setting:
    """What the ambient scope asks of a session: ``(scope, org)``."""
    org = guarded_scope_org()
    if org is UNGUARDED:
        return ALL
    if org is None:
        return NONE
    return ("org", str(org))


def follow(conn: BaseDatabaseWrapper) -> None:
    """Before a statement on ``conn``: bring the session's setting to the ambient scope when it differs."""
    session: _Session | None = getattr(conn, _ATTR, None)
    if session is None:
        return
    want = desired_setting()
    local = session.local
    if local is None:
        if session.held == want:
            return
    elif conn.connection.pgconn.transaction_status == _IDLE:
        session.local = None  # the transaction it was made for has ended (commit or rollback)
        if session.held == want:
            return
    elif local == want:
        return
    _set(conn, session, want)


def observe(conn: BaseDatabaseWrapper) -> None:
    """Before a statement that does not go through Django's cursor and touches no tenant-scoped table
    (the Postgres driver's bound statements): note that a transaction-local setting has lapsed, so that
    a transaction this statement begins is not taken for the one the setting was made in."""
    session: _Session | None = getattr(conn, _ATTR, None)
    if session is not None and session.local is not None and conn.connection.pgconn.transaction_status == _IDLE:
        session.local = None


def _set(conn: BaseDatabaseWrapper, session: _Session, want: Setting) -> None:
    raw = conn.connection
    status = raw.pgconn.transaction_status
    if status == _IDLE:
        session.held = _UNKNOWN  # until the statement lands
        with conn.wrap_database_errors:
            if raw.autocommit:
                _send(raw, SQL_SET_TENANT, want)
            else:  # atomic() entered, no statement sent yet: set it for the session before BEGIN goes out
                raw.autocommit = True
                try:
                    _send(raw, SQL_SET_TENANT, want)
                finally:
                    raw.autocommit = False
        session.held = want
    elif status == _INTRANS:
        session.local = _UNKNOWN
        with conn.wrap_database_errors:
            _send(raw, SQL_SET_TENANT_LOCAL, want)
        session.local = want
    # else a failed transaction (the statement is a rollback, or fails as any would) or a lost connection


def _send(raw: Any, sql: str, setting: Setting) -> None:
    with raw.cursor() as cursor:
        cursor.execute(sql, list(setting))


def _wrapper(execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: dict[str, Any]) -> Any:
    """The ``execute_wrapper`` on every connection of a scoped database."""
    conn = context["connection"]
    follow(conn)
    session: _Session | None = getattr(conn, _ATTR, None)
    if session is not None and session.local is not None and _rolls_back_to_a_savepoint(sql):
        session.local = _UNKNOWN  # a setting made after the savepoint is undone: which one holds is unknown
    return execute(sql, params, many, context)


def _rolls_back_to_a_savepoint(sql: Any) -> bool:
    return isinstance(sql, str) and sql.lstrip()[: len(_ROLLBACK_TO)].upper() == _ROLLBACK_TO


def uses_other_wrappers(conn: BaseDatabaseWrapper) -> bool:
    """Whether ``conn`` carries an ``execute_wrapper`` besides this module's (a test capturing queries,
    an app's own): the driver then sends its statements through Django's cursor, for them to see."""
    wrappers = conn.execute_wrappers
    return bool(wrappers) and (len(wrappers) > 1 or wrappers[0] is not _wrapper)


@functools.cache
def scoped_aliases() -> tuple[str, ...]:
    """The Postgres database aliases some tenant-scoped model is written to (computed once)."""
    from .tenancy import TenantScopedModel

    found = set()
    for model in apps.get_models():
        if issubclass(model, TenantScopedModel):
            alias = router.db_for_write(model)
            if connections[alias].vendor == "postgresql":
                found.add(alias)
    return tuple(sorted(found))


def _on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **_: Any) -> None:
    """A session starts unset (no row, by the policy) — a new one, or one a pool hands over, whatever
    its last user left in it: set before its first statement."""
    if connection.alias not in scoped_aliases():
        return
    setattr(connection, _ATTR, _Session())
    if _wrapper not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, _wrapper)


def install() -> None:
    """Make every session of a scoped database follow the ambient scope (the app's ``ready()``)."""
    connection_created.connect(_on_connection_created, dispatch_uid="ultimate_jobs.guards.session_scope")
    for alias in scoped_aliases():  # a connection opened before the app was ready (rare)
        conn = connections[alias]
        if conn.connection is not None:
            _on_connection_created(type(conn), conn)
