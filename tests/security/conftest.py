"""The attack suite's database roles: a non-superuser application role that owns the scoped tables.

Postgres skips row-level security for a superuser and a ``BYPASSRLS`` role, and for a table's owner
unless the table FORCEs it. The test database is built by a superuser, so the suite creates the role a
production app would run as — no SUPERUSER, no BYPASSRLS — hands it the scoped tables (so FORCE is what
holds), and switches the test's connection to it with ``SET ROLE``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from tests.security.attacks import two_orgs

SCOPED_TABLES = ("secapp_bucket", "secapp_item", "shop_order")


@pytest.fixture(scope="session")
def app_role(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """A role like the one an application runs as, owning the scoped tables (roles are cluster-wide:
    the name carries the test database's, so concurrent runs never share one)."""
    name = f"uj_app_{connection.settings_dict['NAME']}"[:63]
    quoted = connection.ops.quote_name(name)
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name])
        if cursor.fetchone() is None:
            cursor.execute(f"CREATE ROLE {quoted} NOLOGIN NOSUPERUSER NOBYPASSRLS")
        cursor.execute(f"ALTER ROLE {quoted} NOSUPERUSER NOBYPASSRLS")
        cursor.execute(f"GRANT USAGE ON SCHEMA public TO {quoted}")
        cursor.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {quoted}")
        cursor.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {quoted}")
        for table in SCOPED_TABLES:
            cursor.execute(f"ALTER TABLE {table} OWNER TO {quoted}")
    yield name
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("RESET ROLE")
        cursor.execute(f"REASSIGN OWNED BY {quoted} TO CURRENT_USER")
        cursor.execute(f"DROP OWNED BY {quoted}")
        cursor.execute(f"DROP ROLE {quoted}")


@pytest.fixture
def as_app_role(app_role: str) -> Iterator[str]:
    """This test's connection acts as the application role (row-level security applies)."""
    quoted = connection.ops.quote_name(app_role)
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {quoted}")
    try:
        yield app_role
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


@pytest.fixture
def app_role_on_every_connection(as_app_role: str) -> Iterator[str]:
    """This test's connection, and every connection any thread opens meanwhile, act as the application
    role — as a deployment's do, whose settings name that role."""
    quoted = connection.ops.quote_name(as_app_role)

    def as_the_app(sender: Any, connection: Any, **_: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {quoted}")

    connection_created.connect(as_the_app, dispatch_uid="tests.security.app-role-on-every-connection")
    try:
        yield as_app_role
    finally:
        connection_created.disconnect(dispatch_uid="tests.security.app-role-on-every-connection")


@pytest.fixture(params=["python guard", "row-level security"])
def guard(request: pytest.FixtureRequest) -> str:
    """Which layers hold: the Python guard alone (the superuser's connections, which Postgres exempts from
    row-level security), or it and row-level security together (every connection acts as the app role)."""
    if request.param == "row-level security":
        request.getfixturevalue("app_role_on_every_connection")
    return str(request.param)


@pytest.fixture
def rows(guard: str) -> dict[str, Any]:
    """One bucket, item and note per org, stored outside any scope (under either ``guard``)."""
    return two_orgs()
