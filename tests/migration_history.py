"""Migrate an empty database along one history of the app's migrations, then print what its ``x_*``
tables carry as JSON (``python -m tests.migration_history HISTORY`` under ``tests.migration_settings``).

Histories (``tests/postgres/test_migration_history.py`` compares their answers):

- ``fresh``: ``migrate`` on an empty database, as a new project runs it;
- ``earlier-0008``: a database that ran the earlier ``0008``, which also built ``x_jobs_live_queue_idx``
  and ``x_jobs_finished_idx``, and stopped there; then ``migrate``;
- ``earlier-0009``: one that also ran the earlier ``0009``, which dropped them again (so ``0009`` is
  recorded and the indexes are gone); then ``migrate``.

The answer: every ``x_*`` table's constraints and indexes (Django's operator store, the same shape on
PostgreSQL and SQLite), each index's SQL where the database keeps it, and what ``makemigrations
--check --dry-run`` said.
"""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import django

EARLIER_0008_INDEXES = {
    "x_jobs_live_queue_idx": (("queue", "state", "run_at"), ("ready", "delayed", "running", "suspended")),
    "x_jobs_finished_idx": (("state", "finished_at"), ("done", "failed", "dead", "cancelled")),
}
"""The two indexes on ``x_jobs`` the earlier ``0008`` built: name → (fields, the states it covered)."""


def build_earlier_0008_indexes() -> None:
    """Build the two indexes as the earlier ``0008`` declared them, on the model as it stood there."""
    from django.db import connection, models
    from django.db.migrations.executor import MigrationExecutor

    state = MigrationExecutor(connection).loader.project_state(("ultimate_jobs", "0008_retention_indexes"))
    job = state.apps.get_model("ultimate_jobs", "Job")
    with connection.schema_editor() as editor:
        for name, (fields, states) in EARLIER_0008_INDEXES.items():
            index = models.Index(*(models.F(f) for f in fields), condition=models.Q(state__in=states), name=name)
            editor.add_index(job, index)


def drop_earlier_0008_indexes() -> None:
    """What the earlier ``0009`` did: drop the two indexes."""
    from django.db import connection

    with connection.schema_editor() as editor:
        for name in EARLIER_0008_INDEXES:
            editor.execute(f"DROP INDEX {editor.quote_name(name)}")


def schema() -> dict[str, Any]:
    """Every ``x_*`` table's constraints and indexes, and the SQL of each index the database keeps."""
    from django.db import connection

    with connection.cursor() as cursor:
        tables = sorted(t for t in connection.introspection.table_names(cursor) if t.startswith("x_"))
        found: dict[str, Any] = {}
        for table in tables:
            constraints = connection.introspection.get_constraints(cursor, table)
            found[table] = {name: {k: v for k, v in c.items() if k != "definition"} for name, c in constraints.items()}
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'x\\_%'")
        else:
            cursor.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name LIKE 'x\\_%' ESCAPE '\\'"
            )
        index_sql = dict(sorted(cursor.fetchall()))
    return {"tables": found, "index_sql": index_sql}


def main(history: str) -> None:
    django.setup()
    from django.core.management import call_command

    quiet = {"verbosity": 0, "stdout": io.StringIO()}
    if history in ("earlier-0008", "earlier-0009"):
        call_command("migrate", "ultimate_jobs", "0008", **quiet)
        build_earlier_0008_indexes()
        if history == "earlier-0009":
            drop_earlier_0008_indexes()
            call_command("migrate", "ultimate_jobs", "0009", fake=True, **quiet)
    elif history != "fresh":
        raise SystemExit(f"unknown history {history!r}: fresh, earlier-0008 or earlier-0009")
    call_command("migrate", **quiet)
    check = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=check, stderr=check)
        changes = None
    except SystemExit:  # makemigrations --check exits 1 when the models need a migration
        changes = check.getvalue()
    json.dump({"schema": schema(), "makemigrations_changes": changes}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
