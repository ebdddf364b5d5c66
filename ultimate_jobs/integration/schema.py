"""Whether a database carries ultimate_jobs's tables: the app's migrations Django has not applied there.

A role command refuses to start on a database that lacks them (``X_SCHEMA_NOT_MIGRATED``, exit 1, saying
to run ``python manage.py migrate``) rather than logging ``no such table: x_workers`` every few seconds;
``manage.py check --database <alias>`` (and ``migrate``, which runs the database checks) warns.

>>> require_migrated(role="jobs_worker")   # what jobs_worker runs before it starts
"""

from __future__ import annotations

from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from ..conf import jobs_settings
from ..core.installed import job_driver
from ..errors import DriverUnavailableError, SchemaNotMigratedError

APP_LABEL = "ultimate_jobs"


def unapplied_migrations(alias: str) -> list[str]:
    """The names of the ultimate_jobs migrations not applied on database ``alias``, in the order ``migrate``
    would apply them (a squashed migration counts once); empty when the schema is current. A database
    error (the server unreachable) propagates."""
    executor = MigrationExecutor(connections[alias])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes(APP_LABEL))
    return [migration.name for migration, _ in plan if migration.app_label == APP_LABEL]


def migrate_command(alias: str) -> str:
    """The command that applies the migrations on ``alias``."""
    return "python manage.py migrate" if alias == "default" else f"python manage.py migrate --database {alias}"


def unapplied_text(alias: str, missing: list[str]) -> str:
    """``database 'default' lacks 9 ultimate_jobs migrations (0001_initial … 0009_x)``."""
    names = missing[0] if len(missing) == 1 else f"{missing[0]} … {missing[-1]}"
    plural = "migration" if len(missing) == 1 else "migrations"
    return f"database {alias!r} lacks {len(missing)} ultimate_jobs {plural} ({names})"


def role_aliases(*, outbox: bool) -> list[str]:
    """The databases a role reads ultimate_jobs tables from: the driver's (``None`` for Redis and memory,
    which keep no rows in Django's databases) and, for a role that runs the outbox relay, the jobs
    database that holds ``x_outbox``."""
    aliases = {job_driver().alias}
    if outbox:
        aliases.add(jobs_settings().database)
    return sorted(alias for alias in aliases if alias is not None)


def require_migrated(*, role: str, outbox: bool = False) -> None:
    """Refuse to start ``role`` when a database it reads lacks ultimate_jobs migrations:
    ``X_SCHEMA_NOT_MIGRATED`` naming them and the ``migrate`` command; ``X_DRIVER_UNAVAILABLE`` when the
    database cannot be reached to ask. ``outbox``: the role runs the outbox relay (:func:`role_aliases`)."""
    for alias in role_aliases(outbox=outbox):
        try:
            missing = unapplied_migrations(alias)
        except DatabaseError as exc:
            raise DriverUnavailableError(
                f"{role} cannot reach database {alias!r} to check its ultimate_jobs tables ({exc}). "
                f"Fix: start the database or correct DATABASES[{alias!r}], then start {role} again",
                {"alias": alias, "role": role},
            ) from exc
        if missing:
            raise SchemaNotMigratedError(
                f"{role} cannot start: {unapplied_text(alias, missing)}, so its tables (x_jobs, x_workers, …) "
                f"are missing or out of date. Fix: {migrate_command(alias)}, then start {role} again",
                {"alias": alias, "role": role, "unapplied": missing},
            )
