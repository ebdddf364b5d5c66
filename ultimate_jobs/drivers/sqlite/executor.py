"""The one seam the SQLite driver runs statements through, on Django's own connection for an alias.

Each statement runs on ``connections[alias]`` — inside ``transaction.atomic()`` that IS the caller's
transaction, so an enqueue there commits or rolls back with the caller's rows. An operation of several
statements runs in :meth:`SqliteExecutor.write`: ``BEGIN IMMEDIATE`` outside a transaction (it takes
SQLite's one write lock first, so a read-then-write never fails on a snapshot another process moved;
writers queue on the lock for the connection's ``timeout``), a savepoint inside the caller's.

Every connection the driver uses is switched to WAL (``PRAGMA journal_mode=WAL``, kept by the file):
readers never block the writer and the writer never blocks readers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import connections, transaction

from ..sql.executor import Binding, Params, checked_alias
from .queries.session import SQL_BEGIN_IMMEDIATE, SQL_COMMIT, SQL_ROLLBACK, SQL_WAL


class SqliteExecutor:
    """Statements on ``connections[alias]``; raises ``X_DRIVER_UNAVAILABLE`` for an alias that is not SQLite.

    Statements are written with SQLite's own named parameters (``:now``), so each runs as written on the
    raw ``sqlite3`` connection (its statement cache keeps every constant prepared). Under ``DEBUG`` (or a
    test that captures queries) they go through Django's cursor, so ``connection.queries`` shows them.
    """

    def __init__(self, alias: str = "default") -> None:
        self.alias = checked_alias(
            alias,
            vendor="sqlite",
            refusal="the sqlite driver needs an SQLite database; alias {alias!r} is {found}. Set "
            "ULTIMATE_JOBS['DRIVER'] = 'postgres' for a PostgreSQL alias",
        )

    def _raw(self) -> Any:
        conn = connections[self.alias]
        conn.close_if_health_check_failed()
        conn.ensure_connection()
        raw = conn.connection
        if getattr(conn, "_ultimate_jobs_wal", None) is not raw and not raw.in_transaction:
            # the mode cannot change inside a transaction: a connection first used inside the caller's
            # atomic() block is switched at its next statement outside one (the file keeps the mode)
            with conn.wrap_database_errors:
                raw.execute(SQL_WAL).fetchall()
            conn._ultimate_jobs_wal = raw  # type: ignore[attr-defined]
        return raw

    def query(self, sql: str, params: Params = None, *, binding: Binding = "django") -> list[tuple[Any, ...]]:
        """Run ``sql`` and answer its rows (an empty list for a statement with no result). Every statement is
        bound alike (``binding`` is the Postgres executor's hint, ignored here)."""
        conn = connections[self.alias]
        raw = self._raw()
        if settings.DEBUG or conn.force_debug_cursor or conn.execute_wrappers:
            with conn.cursor() as cursor:
                cursor.execute(sql.replace("%", "%%") if params else sql, params)
                return list(cursor.fetchall()) if cursor.description is not None else []
        with conn.wrap_database_errors:
            cursor = raw.execute(sql, params if params is not None else ())
            try:
                return cursor.fetchall() if cursor.description is not None else []
            finally:
                cursor.close()

    def in_transaction(self) -> bool:
        """Whether a statement now runs inside the caller's ``atomic()`` block."""
        return connections[self.alias].in_atomic_block

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction: ``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an exception), or a
        savepoint inside the caller's ``atomic()`` block."""
        conn = connections[self.alias]
        raw = self._raw()
        if conn.in_atomic_block or raw.in_transaction:  # the caller's transaction (atomic, or autocommit off)
            with transaction.atomic(using=self.alias):
                yield
            return
        conn.validate_no_broken_transaction()
        with conn.wrap_database_errors:
            raw.execute(SQL_BEGIN_IMMEDIATE)
        try:
            yield
        except BaseException:
            with conn.wrap_database_errors:
                if raw.in_transaction:
                    raw.execute(SQL_ROLLBACK)
            raise
        with conn.wrap_database_errors:
            raw.execute(SQL_COMMIT)
