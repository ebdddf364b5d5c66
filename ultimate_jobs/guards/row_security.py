"""Row-level security on Postgres: the database itself refuses another org's rows inside a run.

The Python guard (:mod:`ultimate_jobs.guards.tenancy`) sees the rows the ORM builds and the querysets of
tenant-scoped models; it cannot see a subquery, an ``Exists``, a join from an unscoped model, an
aggregate over a relation or raw SQL. On Postgres a policy on each scoped table closes those:

- :class:`EnableTenantRowSecurity`, a migration operation, turns on (and forces) row-level security on
  a scoped model's table with one policy keyed on two per-session settings;
- the ambient scope (a run, ``acting_as``, ``cross_tenant``) is set on a session before each statement
  that runs under a scope the session does not hold yet, on every connection of a database a scoped model
  lives in, whichever thread holds it (:mod:`ultimate_jobs.guards.session_scope`);
- a system check (``manage.py check --database default``, run by ``migrate`` too) warns when the
  database role bypasses the policies (a superuser or ``BYPASSRLS``) or a scoped table has none.

Outside any scope and under ``cross_tenant()`` the policy allows every row, as the Python guard does;
in a run of org A it shows and accepts org A's rows only; in a ``tenant="none"`` run outside
``cross_tenant()``, on a thread started inside a run, and in a session no one set, it shows none.

>>> class Migration(migrations.Migration):
...     dependencies = [("shop", "0001_initial")]
...     operations = [EnableTenantRowSecurity("Order")]
"""

from __future__ import annotations

import logging
from typing import Any

from django.apps import apps
from django.core import checks
from django.db import connections, router
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

from ..core.scope import start_threads_with_no_org
from . import session_scope
from .session_scope import scoped_aliases

__all__ = ["EnableTenantRowSecurity"]

log = logging.getLogger("ultimate_jobs.guards.row_security")

POLICY_NAME = "ultimate_jobs_tenant"
"""The one policy :class:`EnableTenantRowSecurity` puts on a table."""

SQL_POLICY_PREDICATE = (
    "CASE current_setting('ultimate_jobs.tenant_scope', true) "
    "WHEN 'org' THEN {column}::text = current_setting('ultimate_jobs.org_id', true) "
    "WHEN 'all' THEN true "
    "ELSE false END"
)
"""Which rows a session sees and may write: its org's in a run, every row outside any scope (and under
``cross_tenant()``), and none otherwise — in a run with no org, and in a session no one set (the
settings are :data:`~ultimate_jobs.guards.session_scope.SETTING_SCOPE` and ``SETTING_ORG``)."""

SQL_ENABLE = "ALTER TABLE {table} ENABLE ROW LEVEL SECURITY"
SQL_FORCE = "ALTER TABLE {table} FORCE ROW LEVEL SECURITY"
"""Without FORCE the table's owner — usually the role the app migrates and runs with — skips policies."""
SQL_CREATE_POLICY = "CREATE POLICY {policy} ON {table} USING ({predicate}) WITH CHECK ({predicate})"
SQL_DROP_POLICY = "DROP POLICY IF EXISTS {policy} ON {table}"
SQL_NO_FORCE = "ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY"
SQL_DISABLE = "ALTER TABLE {table} DISABLE ROW LEVEL SECURITY"

SQL_ROLE_BYPASSES = "SELECT rolname, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
"""Does the connected role skip every policy (a superuser or ``BYPASSRLS``)?"""

SQL_TABLES_WITHOUT_POLICY = """
SELECT t.name
FROM unnest(%s::text[]) AS t(name)
JOIN pg_class c ON c.oid = to_regclass(quote_ident(t.name))
WHERE NOT (c.relrowsecurity AND c.relforcerowsecurity)
   OR NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'ultimate_jobs_tenant')
"""
"""The scoped tables (of those named) that exist without forced row-level security or the policy (a table
not created yet is the migrations' business: ``migrate`` runs this check before it applies them)."""


class EnableTenantRowSecurity(Operation):
    """A migration operation: row-level security on a tenant-scoped model's table (Postgres; a no-op
    elsewhere). ``field`` names the org field (``TENANT_FIELD``, default ``org_id``).

    >>> operations = [EnableTenantRowSecurity("Order"), EnableTenantRowSecurity("Invoice", field="org")]

    Reversible: unapplying drops the policy and turns row-level security off again.
    """

    reversible = True
    reduces_to_sql = True

    def __init__(self, model_name: str, field: str = "org_id") -> None:
        self.model_name = model_name
        self.field = field

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {"field": self.field} if self.field != "org_id" else {}
        return type(self).__qualname__, [self.model_name], kwargs

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        """Row-level security is not part of the model state."""

    def database_forwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        self._execute(app_label, schema_editor, to_state, forwards=True)

    def database_backwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        self._execute(app_label, schema_editor, from_state, forwards=False)

    def _execute(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, state: ProjectState, *, forwards: bool
    ) -> None:
        target = self._target(app_label, schema_editor, state)
        if target is None:
            return
        table, column = target
        predicate = SQL_POLICY_PREDICATE.format(column=column)
        drop = SQL_DROP_POLICY.format(policy=POLICY_NAME, table=table)
        statements = (
            [
                SQL_ENABLE,
                SQL_FORCE,
                drop,
                SQL_CREATE_POLICY.format(policy=POLICY_NAME, table=table, predicate=predicate),
            ]
            if forwards
            else [drop, SQL_NO_FORCE, SQL_DISABLE]
        )
        for statement in statements:
            schema_editor.execute(statement.format(table=table))

    def _target(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, state: ProjectState
    ) -> tuple[str, str] | None:
        """The quoted table and org column, or ``None`` where this database takes no policy."""
        connection = schema_editor.connection
        if connection.vendor != "postgresql":
            return None
        model = state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(connection.alias, model):
            return None
        quote = schema_editor.quote_name
        return quote(model._meta.db_table), quote(model._meta.get_field(self.field).column)

    def describe(self) -> str:
        return f"Enable tenant row-level security on {self.model_name}"

    @property
    def migration_name_fragment(self) -> str:
        return f"tenant_row_security_{self.model_name.lower()}"


def scoped_models(alias: str) -> list[type[Any]]:
    """The tenant-scoped models written to ``alias``."""
    from .tenancy import TenantScopedModel

    return [m for m in apps.get_models() if issubclass(m, TenantScopedModel) and router.db_for_write(m) == alias]


def install() -> None:
    """Row-level security and the tenant guard at start-up (the app's ``ready()``): every session of a
    scoped database follows the ambient scope; a thread started inside a run starts with no org; the
    system check is registered."""
    from .tenancy import TenantScopedModel

    if any(issubclass(model, TenantScopedModel) for model in apps.get_models()):
        start_threads_with_no_org()
    session_scope.install()
    checks.register(check_row_security, checks.Tags.database)


# -- the system check ---------------------------------------------------------------------------------


def unenforced_aliases() -> tuple[str, ...]:
    """The non-Postgres database aliases some tenant-scoped model is written to: row-level security is a
    PostgreSQL feature, so there only the Python guard holds."""
    from .tenancy import TenantScopedModel

    found = set()
    for model in apps.get_models():
        if issubclass(model, TenantScopedModel):
            alias = router.db_for_write(model)
            if connections[alias].vendor != "postgresql":
                found.add(alias)
    return tuple(sorted(found))


def check_row_security(app_configs: Any = None, databases: Any = None, **_: Any) -> list[checks.CheckMessage]:
    """Warn when a scoped database's role bypasses row-level security, or a scoped table has none; say so
    (an Info, not an error) when a scoped model lives on a database with no row-level security (SQLite):
    :class:`EnableTenantRowSecurity` is a no-op there and only the Python guard confines a run. Like every
    database check, it runs for the databases Django names (``check --database``, ``migrate``)."""
    found: list[checks.CheckMessage] = [
        checks.Info(
            f"database {alias!r} is {connections[alias].vendor}, which has no row-level security: "
            "EnableTenantRowSecurity does nothing there, and only the Python guard confines a run to its org",
            hint="for the database itself to refuse another org's rows, run the tenant-scoped models on PostgreSQL",
            id="ultimate_jobs.X_TENANCY_ROW_SECURITY_UNAVAILABLE",
        )
        for alias in unenforced_aliases()
        if databases and alias in databases  # the database checks: check --database, migrate
    ]
    for alias in scoped_aliases():
        if not databases or alias not in databases:
            continue  # Django asks for the databases a check may query (none unless --database / migrate)
        models = scoped_models(alias)
        with connections[alias].cursor() as cursor:
            cursor.execute(SQL_ROLE_BYPASSES)
            row = cursor.fetchone()
            tables = [m._meta.db_table for m in models]
            cursor.execute(SQL_TABLES_WITHOUT_POLICY, [tables])
            missing = [name for (name,) in cursor.fetchall()]
        if row is not None and row[1]:
            found.append(
                checks.Warning(
                    f"database {alias!r}: role {row[0]!r} is a superuser or has BYPASSRLS, so Postgres ignores "
                    "the tenant row-level security policies and only the Python guard holds",
                    hint="run the app as a role without SUPERUSER and BYPASSRLS (ALTER ROLE … NOSUPERUSER NOBYPASSRLS)",
                    id="ultimate_jobs.X_TENANCY_ROW_SECURITY_BYPASSED",
                )
            )
        by_table = {m._meta.db_table: m for m in models}
        for table in missing:
            model = by_table[table]
            found.append(
                checks.Warning(
                    f"{model._meta.label}: table {table!r} has no forced tenant row-level security, so raw SQL, "
                    "subqueries and joins into it are not confined to the run's org",
                    hint=f"add EnableTenantRowSecurity({model.__name__!r}) to a migration of {model._meta.app_label!r}",
                    obj=model,
                    id="ultimate_jobs.X_TENANCY_ROW_SECURITY_OFF",
                )
            )
    return found
