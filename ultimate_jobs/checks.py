"""The system check over ``settings.ULTIMATE_JOBS``: ``manage.py check`` (and ``migrate``, ``runserver`` and
every role command, which run the checks first) fails on a setting that cannot mean what it says, not
the fourth attempt of a job.

Every refusal is a ``checks.Error`` whose id is ``ultimate_jobs.<CODE>`` and whose hint says the fix:

- a value no key's reader accepts (:mod:`ultimate_jobs.conf`): ``X_SETTINGS_KEY_UNKNOWN`` (a typo'd key),
  ``X_SETTINGS_VALUE_INVALID`` (a bad type or value), ``X_SETTINGS_DRIVER_UNKNOWN``,
  ``X_SETTINGS_LIMITS_INVALID``, ``X_SETTINGS_REDIS_URL_INVALID``, ``X_SETTINGS_ENVIRONMENT_INVALID``;
- what only the rest of the project can answer: ``X_SETTINGS_DATABASE_UNKNOWN`` (``DATABASE`` is no alias
  of ``DATABASES``), ``X_SETTINGS_DATABASE_NOT_POSTGRES`` (the Postgres driver or the outbox on another
  database), ``X_SETTINGS_DATABASE_NOT_SQLITE`` (the SQLite driver on another database),
  ``X_SETTINGS_CONTEXT_UNIMPORTABLE``, ``X_SETTINGS_DRIVER_UNKNOWN`` (a dotted path that does
  not import to a callable), ``X_SETTINGS_DRIVER_UNDECLARED`` (a dotted-path driver that leaves a
  capability of the driver contract undeclared), ``X_DRIVER_UNAVAILABLE`` (the redis driver without
  redis-py installed) and
  ``X_JOB_CONCURRENCY_UNENFORCEABLE`` (a job declares ``concurrency`` and the driver has no lease store),
  ``X_JOB_RATE_LIMIT_UNENFORCEABLE`` (a job declares ``rate_limit`` and the driver keeps no rate schedules).

One database check (it runs for the databases Django names: ``check --database <alias>``, ``migrate``)
warns ``X_SCHEMA_NOT_MIGRATED`` when the jobs database lacks ultimate_jobs migrations: a Warning, not an
Error, because ``migrate`` runs the database checks before it applies them, and an Error would stop it.

``manage.py check --deploy`` adds one more, :func:`row_security_deploy_messages`:
``X_TENANCY_ROW_SECURITY_UNENFORCED``, an error for each PostgreSQL database a tenant-scoped model lives on
whose role skips row-level security (a superuser or ``BYPASSRLS``), and for each tenant-scoped table there
without forced row-level security and the policy. Without ``--deploy`` the same findings are the warnings
``X_TENANCY_ROW_SECURITY_BYPASSED`` and ``X_TENANCY_ROW_SECURITY_OFF`` of ``check --database`` and
``migrate`` (:func:`ultimate_jobs.guards.row_security.check_row_security`).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.core import checks
from django.db import DatabaseError, connections
from django.utils.module_loading import import_string

from .conf import CHECK_DRIVER_UNKNOWN, context_factory, read_settings
from .contracts.base import BaseDriver, undeclared_capabilities
from .guards.row_security import SQL_ROLE_BYPASSES, SQL_TABLES_WITHOUT_POLICY, scoped_models
from .guards.session_scope import scoped_aliases
from .integration.schema import migrate_command, unapplied_migrations, unapplied_text

OBJ = "settings.ULTIMATE_JOBS"
CHECK_DATABASE_UNKNOWN = "X_SETTINGS_DATABASE_UNKNOWN"
CHECK_DATABASE_NOT_POSTGRES = "X_SETTINGS_DATABASE_NOT_POSTGRES"
CHECK_DATABASE_NOT_SQLITE = "X_SETTINGS_DATABASE_NOT_SQLITE"
CHECK_CONTEXT_UNIMPORTABLE = "X_SETTINGS_CONTEXT_UNIMPORTABLE"
CHECK_DRIVER_UNAVAILABLE = "X_DRIVER_UNAVAILABLE"
CHECK_DRIVER_UNDECLARED = "X_SETTINGS_DRIVER_UNDECLARED"
CHECK_CONCURRENCY_UNENFORCEABLE = "X_JOB_CONCURRENCY_UNENFORCEABLE"
CHECK_RATE_LIMIT_UNENFORCEABLE = "X_JOB_RATE_LIMIT_UNENFORCEABLE"
CHECK_SCHEMA_NOT_MIGRATED = "X_SCHEMA_NOT_MIGRATED"
CHECK_ROW_SECURITY_UNENFORCED = "X_TENANCY_ROW_SECURITY_UNENFORCED"
CHECK_PREPARED_BEHIND_POOLER = "X_SETTINGS_PREPARED_BEHIND_POOLER"
APP_ROLE_FIX = (
    "connect the app as a role with neither — CREATE ROLE app LOGIN PASSWORD '…' NOSUPERUSER NOBYPASSRLS — that "
    "owns the database (or is granted its tables); the README, Tenancy, 'The app's database role', shows the setup"
)


def _error(check: str, problem: str, fix: str) -> checks.Error:
    return checks.Error(problem, hint=fix, obj=OBJ, id=f"ultimate_jobs.{check}")


def settings_messages() -> list[checks.CheckMessage]:
    """Every problem with ``settings.ULTIMATE_JOBS``, all at once."""
    values, errors = read_settings()
    found: list[checks.CheckMessage] = [_error(e.check, e.problem, e.fix) for e in errors]
    if "database" in values:
        found += _database(values["database"], values.get("driver"), values.get("outbox"))
    if "driver" in values:
        found += _driver(values["driver"])
    if values.get("driver") == "postgres" and values.get("prepared_statements", True):
        found += _prepared_behind_pooler(values.get("database", "default"))
    if values.get("context") is not None:
        found += _context(values["context"])
    return found


def migration_messages(databases: Any) -> list[checks.CheckMessage]:
    """A Warning when the jobs database is one of ``databases`` (the ones Django lets a check query) and
    lacks ultimate_jobs migrations — the role commands would refuse to start (``X_SCHEMA_NOT_MIGRATED``)."""
    alias = read_settings()[0].get("database")
    if alias is None or not databases or alias not in databases or alias not in connections.settings:
        return []
    missing = unapplied_migrations(alias)
    if not missing:
        return []
    return [
        checks.Warning(
            f"{unapplied_text(alias, missing)}: jobs_worker, jobs_scheduler, jobs_relay and jobs_dev refuse to "
            "start until they are applied",
            hint=migrate_command(alias),
            id=f"ultimate_jobs.{CHECK_SCHEMA_NOT_MIGRATED}",
        )
    ]


def _database(alias: str, driver: str | None, outbox: str | None) -> list[checks.CheckMessage]:
    if alias not in connections.settings:
        return [
            _error(
                CHECK_DATABASE_UNKNOWN,
                f"ULTIMATE_JOBS['DATABASE'] = {alias!r} is not an alias of settings.DATABASES",
                f"set it to one of {sorted(connections.settings)}, or add {alias!r} to DATABASES",
            )
        ]
    vendor = connections[alias].vendor
    if driver == "sqlite" and vendor != "sqlite":
        return [
            _error(
                CHECK_DATABASE_NOT_SQLITE,
                f"the sqlite driver needs SQLite; ULTIMATE_JOBS['DATABASE'] = {alias!r} is {vendor}",
                "point DATABASE at an SQLite alias, or set DRIVER = 'postgres' (or leave DRIVER unset: it follows "
                "the database)",
            )
        ]
    uses = (
        ("the postgres driver", driver == "postgres"),
        ("the outbox", outbox in ("optional", "required") and vendor != "sqlite"),  # SQLite stages it too
    )
    users = [name for name, used in uses if used]
    if vendor == "postgresql" or not users:
        return []
    return [
        _error(
            CHECK_DATABASE_NOT_POSTGRES,
            f"{' and '.join(users)} need PostgreSQL; ULTIMATE_JOBS['DATABASE'] = {alias!r} is {vendor}",
            "point DATABASE at a PostgreSQL alias, or set DRIVER = 'memory' and OUTBOX = 'off'",
        )
    ]


def _prepared_behind_pooler(alias: str) -> list[checks.CheckMessage]:
    """A Warning when the jobs database alias says it sits behind a transaction-pooling proxy
    (``DISABLE_SERVER_SIDE_CURSORS``, Django's own setting for PgBouncer in transaction mode) while the driver
    prepares its statements — which PgBouncer before 1.21 cannot carry from one transaction to the next.
    A project that chose psycopg's rule itself (``OPTIONS["prepare_threshold"]``) is left to it."""
    found = connections.settings.get(alias)
    if not found or not found.get("DISABLE_SERVER_SIDE_CURSORS"):
        return []
    if "prepare_threshold" in (found.get("OPTIONS") or {}):
        return []
    return [
        checks.Warning(
            f"DATABASES[{alias!r}] sets DISABLE_SERVER_SIDE_CURSORS (a transaction-pooling proxy such as PgBouncer) "
            "and the postgres driver prepares its statements on the connection, which PgBouncer before 1.21 "
            "cannot carry across transactions",
            hint="set ULTIMATE_JOBS['PREPARED_STATEMENTS'] = False; or, on PgBouncer 1.21 or later with "
            "max_prepared_statements set, silence this check (SILENCED_SYSTEM_CHECKS)",
            obj=OBJ,
            id=f"ultimate_jobs.{CHECK_PREPARED_BEHIND_POOLER}",
        )
    ]


def _driver(name: str) -> list[checks.CheckMessage]:
    """A built-in driver this build carries, or a dotted path to a factory; and a lease store for every job
    that declares ``concurrency`` (the worker would refuse to start)."""
    if name == "redis":  # it keeps a lease store; it needs redis-py, the [redis] extra
        try:
            import_module("redis")
        except ImportError:
            return [
                _error(
                    CHECK_DRIVER_UNAVAILABLE,
                    "ULTIMATE_JOBS['DRIVER'] = 'redis' needs redis-py, which is not installed",
                    "pip install 'ultimate_jobs[redis]', or set DRIVER to 'postgres' (jobs in your Django database)",
                )
            ]
        return []
    if name in ("memory", "postgres", "sqlite"):
        return []  # they declare every capability and keep a lease store
    try:
        factory = import_string(name)
        if not callable(factory):
            raise TypeError(f"{name} is a {type(factory).__name__}")
        driver = factory()
    except Exception as exc:  # anything the factory raises is the setting's fault, reported not raised
        return [
            _error(
                CHECK_DRIVER_UNKNOWN,
                f"ULTIMATE_JOBS['DRIVER'] = {name!r} does not build a driver ({type(exc).__name__}: {exc})",
                "name a zero-argument callable answering a driver, or 'postgres' or 'memory'",
            )
        ]
    missing = driver.check() if isinstance(driver, BaseDriver) else undeclared_capabilities(driver)
    if missing:
        return [
            _error(
                CHECK_DRIVER_UNDECLARED,
                f"ULTIMATE_JOBS['DRIVER'] = {name!r} builds a driver that does not declare: {'; '.join(missing)}",
                "declare each on the driver class, as the built-in drivers do: a store it lacks as None, "
                "supports_wake / supports_listen as False when it has no wake (see docs/conformance.md)",
            )
        ]
    found = [] if driver.leases is not None else _concurrency(name)
    return found if driver.rates is not None else [*found, *_rate_limits(name)]


def _concurrency(driver: str) -> list[checks.CheckMessage]:
    from .core import registry
    from .core.definition import JobHandle

    declaring = sorted(
        h.name for h in registry.registered("job") if isinstance(h, JobHandle) and h.concurrency is not None
    )
    if not declaring:
        return []
    return [
        _error(
            CHECK_CONCURRENCY_UNENFORCEABLE,
            f"jobs {declaring} declare concurrency and the driver {driver!r} has no lease store, so no worker "
            "would start",
            "give the driver a lease store, use one of the built-in drivers (postgres, sqlite, redis, memory), "
            "or drop the concurrency declaration",
        )
    ]


def _rate_limits(driver: str) -> list[checks.CheckMessage]:
    from .core import registry
    from .core.definition import JobHandle

    declaring = sorted(
        h.name for h in registry.registered("job") if isinstance(h, JobHandle) and h.rate_limit is not None
    )
    if not declaring:
        return []
    return [
        _error(
            CHECK_RATE_LIMIT_UNENFORCEABLE,
            f"jobs {declaring} declare a rate limit and the driver {driver!r} keeps no rate schedules, so no "
            "worker would start",
            "give the driver a rate store (driver.rates), use one of the built-in drivers (postgres, sqlite, "
            "redis, memory), or drop the rate_limit declaration",
        )
    ]


def _context(path: str) -> list[checks.CheckMessage]:
    try:
        context_factory(path)
    except Exception as exc:  # an import that fails for any reason is the setting's fault, reported not raised
        return [
            _error(
                CHECK_CONTEXT_UNIMPORTABLE,
                f"ULTIMATE_JOBS['CONTEXT'] = {path!r} does not import to a callable ({type(exc).__name__}: {exc})",
                "name a zero-argument callable by its dotted path (module.attribute), or set CONTEXT = None",
            )
        ]
    return []


def row_security_deploy_messages(app_configs: Any = None, **_: Any) -> list[checks.CheckMessage]:
    """``check --deploy``: an error (``X_TENANCY_ROW_SECURITY_UNENFORCED``) for each PostgreSQL database a
    tenant-scoped model lives on whose role bypasses row-level security, and for each tenant-scoped table
    there without forced row-level security and the policy — each means a run's raw SQL, subqueries and joins
    reach every org's rows. Unlike a plain database check it asks those databases whatever ``--database``
    names: a deploy check must fail the deploy on its own. A database it cannot ask is an error too."""
    found: list[checks.CheckMessage] = []
    for alias in scoped_aliases():
        models = scoped_models(alias)
        by_table = {m._meta.db_table: m for m in models}
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute(SQL_ROLE_BYPASSES)
                role = cursor.fetchone()
                cursor.execute(SQL_TABLES_WITHOUT_POLICY, [list(by_table)])
                missing = [name for (name,) in cursor.fetchall()]
        except DatabaseError as exc:
            found.append(
                _unenforced(
                    f"database {alias!r} holds tenant-scoped models and could not be asked whether row-level "
                    f"security holds there ({type(exc).__name__}: {str(exc).strip()[:200]})",
                    "run check --deploy where the database is reachable, with the credentials the app uses",
                )
            )
            continue
        if role is not None and role[1]:
            found.append(
                _unenforced(
                    f"database {alias!r}: the app connects as role {role[0]!r}, a superuser or BYPASSRLS role, so "
                    "Postgres ignores every tenant row-level security policy and only the Python guard confines a run",
                    APP_ROLE_FIX,
                )
            )
        for table in missing:
            model = by_table[table]
            found.append(
                _unenforced(
                    f"{model._meta.label}: table {table!r} has no forced tenant row-level security policy, so a "
                    "run's raw SQL, subqueries and joins into it reach every org's rows",
                    f"add EnableTenantRowSecurity({model.__name__!r}) to a migration of "
                    f"{model._meta.app_label!r} and migrate",
                    obj=model,
                )
            )
    return found


def _unenforced(problem: str, fix: str, obj: Any = None) -> checks.Error:
    return checks.Error(problem, hint=fix, obj=obj, id=f"ultimate_jobs.{CHECK_ROW_SECURITY_UNENFORCED}")
