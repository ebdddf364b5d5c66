"""The one seam every Postgres store runs statements through: ``Executor.query(sql, params)``.

There is one builder, :func:`django_executor`, over a Django database alias: each statement runs on
``connections[alias]``, which inside ``transaction.atomic()`` IS the transaction's connection, so an
enqueue there joins the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import psycopg
from django.conf import settings
from django.db import connections

from ...errors import DriverUnavailableError

Params = Mapping[str, Any] | Sequence[Any] | None


class Executor(Protocol):
    """Runs one statement and answers its rows (an empty list for a statement with no result)."""

    alias: str

    def query(self, sql: str, params: Params = None, *, prepared: bool = False) -> list[tuple[Any, ...]]:
        """Run ``sql`` with ``params``; psycopg and Django errors surface as they are. ``prepared`` marks a
        hot statement the executor may bind server-side and prepare."""


class DjangoExecutor:
    """Statements on ``connections[alias]`` — the ambient transaction's connection when there is one.

    A ``prepared`` statement (the driver's hot path: claim, ack, nack, heartbeat, step, enqueue) is
    sent with server-side binding on the same psycopg connection, so psycopg prepares it once the
    connection's ``prepare_threshold`` is reached (5 by default; set ``"OPTIONS": {"prepare_threshold":
    None}`` in ``DATABASES`` behind a transaction-pooling PgBouncer older than 1.21, which cannot keep
    prepared statements). Django's default client-side binding plans every statement anew, which for
    ``SQL_CLAIM`` costs more than running it. Under ``DEBUG`` (or a test that captures queries) every
    statement goes through Django's cursor instead, so ``connection.queries`` shows it.
    """

    def __init__(self, alias: str = "default") -> None:
        if alias not in connections.settings:
            raise DriverUnavailableError(
                f"no database alias {alias!r} in settings.DATABASES; set ULTIMATE_JOBS['DATABASE'] to one that exists",
                {"alias": alias},
            )
        vendor = connections[alias].vendor
        if vendor != "postgresql":
            raise DriverUnavailableError(
                f"the postgres driver needs a PostgreSQL database; alias {alias!r} is {vendor}", {"alias": alias}
            )
        self.alias = alias

    def query(self, sql: str, params: Params = None, *, prepared: bool = False) -> list[tuple[Any, ...]]:
        conn = connections[self.alias]
        if prepared and not (settings.DEBUG or conn.force_debug_cursor or conn.execute_wrappers):
            return self._query_bound(conn, sql, params)
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description is not None else []

    @staticmethod
    def _query_bound(conn: Any, sql: str, params: Params) -> list[tuple[Any, ...]]:
        """What Django's cursor wrapper does around a statement, on a server-side binding cursor."""
        conn.close_if_health_check_failed()
        conn.ensure_connection()
        conn.validate_no_broken_transaction()
        with conn.wrap_database_errors, psycopg.Cursor(conn.connection) as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description is not None else []


def django_executor(alias: str = "default") -> DjangoExecutor:
    """The executor over a Django database alias (the only builder)."""
    return DjangoExecutor(alias)


def jsonb(value: Any) -> str:
    """A value as a jsonb parameter's text (bind it as ``%(x)s::jsonb``)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def from_jsonb(value: Any) -> Any:
    """A jsonb column as Python: Django's psycopg setup hands raw statements jsonb as text."""
    return json.loads(value) if isinstance(value, str | bytes) else value
