"""The flush after a ``transactional_db`` test, cheaper: only the tables the test left rows in.

Django's ``TransactionTestCase`` ends each test with ``manage.py flush``: one ``TRUNCATE`` of every table
(thirty-odd here, each with its indexes given new files), then ``post_migrate`` writing the content types
and permissions back — 0.3 s on a quiet machine, over a second on a loaded one, after each of the suite's
~750 transactional tests, most of which wrote to two or three tables.

:func:`flush_written_tables` leaves the database as that flush does: it empties every table that holds
rows (``DELETE``, else ``TRUNCATE … CASCADE``), except the tables ``post_migrate`` fills when they hold exactly what it
wrote. When one of those changed (or the first time, before there is anything to compare with) it runs
Django's own flush. :func:`install` makes it the teardown of every ``TransactionTestCase`` (pytest-django's
``transactional_db`` is one) that flushes the whole database; one with ``available_apps`` or
``serialized_rollback`` keeps Django's.
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.color import no_style
from django.db import IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import TransactionTestCase

Rows = list[tuple[Any, ...]]

_SEEDED: dict[str, dict[str, Rows]] = {}
"""Per database alias: the tables that hold rows right after Django's flush (``post_migrate``'s content
types and permissions), with those rows."""


def _holding_rows(conn: BaseDatabaseWrapper, tables: list[str]) -> set[str]:
    """The tables of ``tables`` that hold a row, in one query."""
    if not tables:
        return set()
    quote = conn.ops.quote_name
    sql = " UNION ALL ".join(f"SELECT %s WHERE EXISTS (SELECT 1 FROM {quote(t)})" for t in tables)
    with conn.cursor() as cursor:
        cursor.execute(sql, tables)
        return {name for (name,) in cursor.fetchall()}


def _rows(conn: BaseDatabaseWrapper, table: str) -> Rows:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {conn.ops.quote_name(table)} ORDER BY 1")
        return [tuple(row) for row in cursor.fetchall()]


def _django_flush(conn: BaseDatabaseWrapper) -> None:
    """Django's flush (what ``TransactionTestCase`` runs), then what it left: the seeded tables' rows."""
    call_command(
        "flush",
        verbosity=0,
        interactive=False,
        database=conn.alias,
        reset_sequences=False,
        allow_cascade=False,
        inhibit_post_migrate=False,
    )
    tables = conn.introspection.django_table_names(only_existing=True, include_views=False)
    _SEEDED[conn.alias] = {table: _rows(conn, table) for table in sorted(_holding_rows(conn, tables))}


def flush_written_tables(conn: BaseDatabaseWrapper) -> list[str]:
    """Empty what a test left in ``conn``'s database, as ``manage.py flush`` would; answers the tables
    truncated (``["*"]`` when it ran Django's flush)."""
    seeded = _SEEDED.get(conn.alias)
    tables = conn.introspection.django_table_names(only_existing=True, include_views=False)
    holding = _holding_rows(conn, tables)
    if seeded is None or any(t not in holding or _rows(conn, t) != rows for t, rows in seeded.items()):
        _django_flush(conn)
        return ["*"]
    written = sorted(holding - seeded.keys())
    if written:
        _empty(conn, written)
        # a cascade reaches only tables that reference these; should it ever empty a seeded one, start over
        if _holding_rows(conn, list(seeded)) != seeded.keys():
            _django_flush(conn)
            return ["*"]
    return written


def _empty(conn: BaseDatabaseWrapper, tables: list[str]) -> None:
    """Empty ``tables``. On Postgres one transaction of ``DELETE``s with every deferrable constraint
    deferred: a test leaves a few rows, and ``TRUNCATE`` gives each table and index new files, which costs
    more than deleting them. A constraint that still refuses (a non-deferrable foreign key met in the wrong
    order) rolls it back, and ``TRUNCATE … CASCADE`` empties them instead."""
    if conn.vendor == "postgresql":
        quote = conn.ops.quote_name
        try:
            with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
                for table in tables:
                    cursor.execute(f"DELETE FROM {quote(table)}")
            return
        except IntegrityError:
            pass
    conn.ops.execute_sql_flush(conn.ops.sql_flush(no_style(), tables, allow_cascade=True))


_DJANGO_TEARDOWN = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]  # Django's private hook


def _fixture_teardown(self: TransactionTestCase) -> None:
    if self.available_apps is not None or self.serialized_rollback:
        _DJANGO_TEARDOWN(self)
        return
    for db_name in self._databases_names(include_mirrors=False):  # type: ignore[attr-defined]
        flush_written_tables(connections[db_name])


def install() -> None:
    """Make :func:`flush_written_tables` the teardown of every ``TransactionTestCase`` that flushes the
    whole database (``django.test.TestCase`` keeps its rollback)."""
    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[attr-defined]
