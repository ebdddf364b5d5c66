"""The README's table list ("The Postgres driver: tables and statements") names exactly the ``x_*`` tables
``migrate`` creates, so a new table cannot go undocumented (the SQLite half checks its own database)."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.readme import documented_tables

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def test_the_readme_lists_every_table_migrate_creates_and_no_other() -> None:
    with connection.cursor() as cursor:
        migrated = sorted(t for t in connection.introspection.table_names(cursor) if t.startswith("x_"))
    documented = documented_tables()
    assert len(documented) == len(set(documented)), documented
    assert sorted(documented) == migrated
