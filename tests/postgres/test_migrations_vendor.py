"""The migrations give PostgreSQL its own DDL: 0008's retention index is built CONCURRENTLY there (the
SQLite half of the suite checks the plain build on SQLite)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]  # CONCURRENTLY: no transaction


def test_0008_builds_its_index_concurrently_on_postgres() -> None:
    out = StringIO()
    call_command("sqlmigrate", "ultimate_jobs", "0008", stdout=out)
    statements = [line for line in out.getvalue().splitlines() if line.startswith("CREATE")]
    assert [s.split(" ON ")[0] for s in statements] == ['CREATE INDEX CONCURRENTLY "x_outbox_published_idx"']
