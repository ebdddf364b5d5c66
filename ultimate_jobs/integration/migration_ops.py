"""Migration operations that give PostgreSQL what it needs and every other database what it can take.

The migrations are one schema for every database the jobs tables live in: PostgreSQL (the ``postgres``
driver) and SQLite (the ``sqlite`` driver). An operation only PostgreSQL has — building an index
``CONCURRENTLY`` — goes through one of these, so PostgreSQL gets exactly that statement and SQLite the
plain equivalent.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db.migrations.operations import AddIndex


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
