"""The one seam every Postgres store runs statements through: ``Executor.query(sql, params)``.

There is one builder, :func:`django_executor`, over a Django database alias: each statement runs on
``connections[alias]``, which inside ``transaction.atomic()`` IS the transaction's connection, so an
enqueue there joins the caller's transaction.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import psycopg
from django.conf import settings
from django.db import connections
from psycopg.pq import ExecStatus, TransactionStatus

from ...guards.session_scope import observe, uses_other_wrappers
from ..sql.dialect import dumps, loads
from ..sql.executor import Binding, Params, checked_alias

# psycopg prepares a statement after this many runs, or at once when asked (prepare=True): so high that
# on a connection Django left at None only the statements the driver asks for are ever prepared
ONLY_WHEN_ASKED = 2**31 - 1

# Postgres plans a prepared statement again on every run while that plan's estimated cost stays below the
# generic plan's: SQL_CLAIM's does (its queue list is a parameter, so its generic plan is costed for ten
# queues), and planning it cost more than running it. On a connection that ran a "generic" statement,
# plan_cache_mode is force_generic_plan for the rest of the session — and JIT is off: the fair claim's
# estimates over a large x_jobs (its CTEs are costed as if every lane gave every row) cross
# jit_above_cost, and compiling the plan on every run took ~100 ms of a ~1 ms claim.
FORCE_GENERIC_PLAN = "SET plan_cache_mode = force_generic_plan; SET jit = off"
_planned_once: weakref.WeakSet[Any] = weakref.WeakSet()  # the psycopg connections FORCE_GENERIC_PLAN ran on
IDLE = TransactionStatus.IDLE
ROWS = ExecStatus.TUPLES_OK


class Executor(Protocol):
    """Runs one statement and answers its rows (an empty list for a statement with no result)."""

    alias: str

    def query(self, sql: str, params: Params = None, *, binding: Binding = "django") -> list[tuple[Any, ...]]:
        """Run ``sql`` with ``params``; psycopg and Django errors surface as they are. ``binding`` marks a
        hot-path statement the executor may bind server-side (``"server"``: enqueue), prepare on its
        connection (``"prepared"``: the worker's ack, nack, heartbeat, step), or prepare and plan once
        (``"generic"``: the claim)."""


class DjangoExecutor:
    """Statements on ``connections[alias]`` — the ambient transaction's connection when there is one.

    A ``"server"`` statement (an enqueue) is sent with server-side binding on the same psycopg
    connection. A ``"prepared"`` one (the worker's hot path: ack, nack, heartbeat, step) is also
    prepared there once, so Postgres parses it once per connection. Django turns psycopg's automatic
    preparing off by default (``prepare_threshold`` None, for transaction-pooling proxies); these
    statements are prepared anyway — the worker role needs a direct or session-pooled connection already,
    for its LISTEN session — unless ``DATABASES[alias]["OPTIONS"]`` names ``prepare_threshold`` itself:
    then psycopg's rule applies (``None``: never) and the executor changes nothing else on the connection.

    A ``"generic"`` one (``SQL_CLAIM``) is prepared the same way, and the first time it runs on a
    connection outside a transaction the executor sets that session's ``plan_cache_mode`` to
    ``force_generic_plan`` and turns its JIT off (:data:`FORCE_GENERIC_PLAN`), so Postgres plans it once and
    not on every claim (planning it cost more than running it), and never compiles it. The settings stay for
    the session; the worker's claim loop
    has a connection of its own, where only the driver's statements run, and with Django's default
    (nothing of the project's prepared) it touches no statement of the project's but a PL/pgSQL
    function's, should one run there.
    Under ``DEBUG`` (or a test that captures queries, or any ``execute_wrapper`` but the tenant scope's
    own) every statement goes through Django's cursor, so ``connection.queries`` shows it.
    """

    def __init__(self, alias: str = "default", *, prepared: bool = True) -> None:
        refusal = "the postgres driver needs a PostgreSQL database; alias {alias!r} is {found}"
        self.alias = checked_alias(alias, vendor="postgresql", refusal=refusal)
        self.prepared = prepared
        """Whether ``"prepared"`` and ``"generic"`` statements are prepared on the connection
        (``ULTIMATE_JOBS["PREPARED_STATEMENTS"]``): off, they are bound server-side and parsed every time — for a
        transaction-pooling proxy that cannot carry a prepared statement (PgBouncer before 1.21)."""

    def query(self, sql: str, params: Params = None, *, binding: Binding = "django") -> list[tuple[Any, ...]]:
        conn = connections[self.alias]
        if binding != "django" and not (settings.DEBUG or conn.force_debug_cursor or uses_other_wrappers(conn)):
            prepare = self.prepared and binding != "server"
            return self._query_bound(conn, sql, params, prepare=prepare, once=binding == "generic")
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return rows_of(cursor.cursor)  # Django's wrapper (a debug one too) holds the psycopg cursor

    @staticmethod
    def _query_bound(conn: Any, sql: str, params: Params, *, prepare: bool, once: bool) -> list[tuple[Any, ...]]:
        """What Django's cursor wrapper does around a statement, on a server-side binding cursor."""
        conn.close_if_health_check_failed()
        conn.ensure_connection()
        conn.validate_no_broken_transaction()
        observe(conn)  # no scoped table here, but the transaction this may begin must be seen
        raw = conn.connection
        if "prepare_threshold" in conn.settings_dict.get("OPTIONS", {}):
            prepare_it: bool | None = None  # the project chose: psycopg's threshold rule (None never prepares)
        elif prepare:
            prepare_it = True
            if raw.prepare_threshold is None:  # Django's default: prepare what is asked for, nothing else
                raw.prepare_threshold = ONLY_WHEN_ASKED
        else:
            prepare_it = False
        with conn.wrap_database_errors, psycopg.Cursor(raw) as cursor:
            if once and prepare_it and raw not in _planned_once and raw.info.transaction_status == IDLE:
                cursor.execute(FORCE_GENERIC_PLAN)  # outside a transaction: no rollback can take it back
                _planned_once.add(raw)
            cursor.execute(sql, params, prepare=prepare_it)
            return rows_of(cursor)


def rows_of(cursor: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    """The rows the last statement answered, none when it answered no rows (an UPDATE without RETURNING).
    Read off the result's status, not ``cursor.description``: that builds a ``Column`` per column on every
    call — 56 µs for the claim's 27 columns, more than the claim's own row loading."""
    answered = cursor.pgresult
    return cursor.fetchall() if answered is not None and answered.status == ROWS else []


def django_executor(alias: str = "default", *, prepared: bool = True) -> DjangoExecutor:
    """The executor over a Django database alias (the only builder); ``prepared=False`` prepares nothing."""
    return DjangoExecutor(alias, prepared=prepared)


jsonb = dumps
"""A value as a jsonb parameter's text (bind it as ``%(x)s::jsonb``)."""

from_jsonb = loads
"""A jsonb column as Python: Django's psycopg setup hands raw statements jsonb as text."""
