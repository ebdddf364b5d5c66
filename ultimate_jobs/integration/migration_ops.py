"""Migration operations that give PostgreSQL what it needs and every other database what it can take.

The migrations are one schema for every database the jobs tables live in: PostgreSQL (the ``postgres``
driver) and SQLite (the ``sqlite`` driver). An operation only PostgreSQL has — building or dropping an
index ``CONCURRENTLY`` — goes through one of these, so PostgreSQL gets exactly that statement and SQLite the
plain equivalent.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db.migrations.operations import AddIndex
from django.db.migrations.operations.base import Operation


class AddIndexConcurrentlyOnPostgres(AddIndexConcurrently):
    """``CREATE INDEX CONCURRENTLY`` on PostgreSQL (no lock on writers while it builds); a plain
    ``CREATE INDEX`` elsewhere (SQLite has no concurrent build, and its writers queue on one lock anyway).
    Use it in a migration with ``atomic = False``, like :class:`AddIndexConcurrently`."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class DropIndexIfExists(Operation):
    """Drop the index ``name`` where the database has one, and change no model state: ``DROP INDEX
    CONCURRENTLY IF EXISTS`` on PostgreSQL (no lock on writers), ``DROP INDEX IF EXISTS`` elsewhere.

    For an index an earlier version of a migration built and the current version no longer does: a
    database that built it loses it, a fresh one runs a statement that finds nothing, and the models
    never knew the index, so ``makemigrations`` sees no change. Reversing it puts nothing back. Use it in
    a migration with ``atomic = False`` (PostgreSQL runs no concurrent drop inside a transaction).

    >>> operations = [DropIndexIfExists(name="x_jobs_finished_idx")]
    """

    reversible = True
    reduces_to_sql = True

    def __init__(self, name: str) -> None:
        self.name = name

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (self.__class__.__qualname__, [], {"name": self.name})

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # the index is no part of any model's state

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
        schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(self.name)}")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        pass  # the current schema never had the index: there is nothing to put back

    def describe(self) -> str:
        return f"Drop index {self.name} where it exists"

    @property
    def migration_name_fragment(self) -> str:
        return f"drop_{self.name.lower()}"


class RunVendorSQL(Operation):
    """Run the SQL written for the database the migration runs on — ``postgresql``'s or ``sqlite``'s, each a
    ``(forwards, backwards)`` pair of scripts — and change no model state. For what only raw SQL says (a
    trigger), written once per database the jobs tables live in.

    >>> RunVendorSQL(postgresql=(SQL_CREATE, SQL_DROP), sqlite=(SQLITE_CREATE, SQLITE_DROP))
    """

    reversible = True
    reduces_to_sql = True

    def __init__(self, *, postgresql: tuple[str, str], sqlite: tuple[str, str]) -> None:
        self.postgresql = postgresql
        self.sqlite = sqlite

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (self.__class__.__qualname__, [], {"postgresql": self.postgresql, "sqlite": self.sqlite})

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # raw SQL: no model knows it

    def _scripts(self, schema_editor: Any) -> tuple[str, str]:
        vendor = schema_editor.connection.vendor
        if vendor not in ("postgresql", "sqlite"):
            raise NotImplementedError(f"ultimate_jobs' tables live in PostgreSQL or SQLite, not {vendor}")
        return self.postgresql if vendor == "postgresql" else self.sqlite

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        self._run(schema_editor, self._scripts(schema_editor)[0])

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        self._run(schema_editor, self._scripts(schema_editor)[1])

    @staticmethod
    def _run(schema_editor: Any, script: str) -> None:
        """One statement at a time: a script's statements end at a ``;`` closing a line that a blank line
        follows (a function's or trigger's body holds ``;`` of its own, never a blank line)."""
        for statement in script.split(";\n\n"):
            if statement.strip():
                schema_editor.execute(statement.strip().removesuffix(";"))

    def describe(self) -> str:
        return "Run the database's own SQL"
