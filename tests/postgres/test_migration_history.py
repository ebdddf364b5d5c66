"""The migration history before the first release: ``0008`` once built two indexes on ``x_jobs`` that
``0009`` dropped again. Now a fresh ``migrate`` never builds them, and a database that ran the earlier
``0008`` (and perhaps the earlier ``0009``) migrates to the same schema as a fresh one — on PostgreSQL
and on SQLite, with ``makemigrations --check`` clean after each history.

Each history runs in a child process on an empty database of its own (:mod:`tests.migration_history`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import django
import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from tests.migration_history import EARLIER_0008_INDEXES

pytestmark = [pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = ("fresh", "earlier-0008", "earlier-0009")


def migrated(history: str, engine: str, name: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env |= {"DJANGO_SETTINGS_MODULE": "tests.migration_settings", "MIGRATION_DB_ENGINE": engine}
    env["MIGRATION_DB_NAME"] = name
    done = subprocess.run(
        [sys.executable, "-m", "tests.migration_history", history],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"{history} on {engine} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["postgresql", "sqlite3"])
def test_every_history_migrates_to_the_schema_a_fresh_database_gets(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    answers = {}
    for history in HISTORIES:
        name = empty_pg_database(request, history) if engine == "postgresql" else str(tmp_path / f"{history}.sqlite")
        answers[history] = migrated(history, engine, name)
    fresh = answers["fresh"]["schema"]
    assert {"x_jobs", "x_outbox", "x_webhook_deliveries"} <= set(fresh["tables"])
    assert "x_outbox_published_idx" in fresh["tables"]["x_outbox"]
    for history, answer in answers.items():
        assert answer["makemigrations_changes"] is None, f"{history}: {answer['makemigrations_changes']}"
        assert answer["schema"] == fresh, history
        for index in EARLIER_0008_INDEXES:
            assert index not in answer["schema"]["index_sql"], (history, index)


def empty_pg_database(request: pytest.FixtureRequest, history: str) -> str:
    """An empty database of the test's own on the suite's server, dropped when the test ends."""
    base = settings.DATABASES["default"]
    leg = f"{django.VERSION[0]}{django.VERSION[1]}"
    name = f"{os.environ.get('ULTIMATE_JOBS_TEST_DB', 'ultimate_jobs')}_history_{history}_{leg}".replace("-", "_")
    params = {"host": base["HOST"], "port": base["PORT"], "user": base["USER"], "dbname": "postgres"}
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    request.addfinalizer(drop)
    return name


@pytest.mark.django_db(transaction=True)  # sqlmigrate of a CONCURRENTLY operation: no transaction
def test_no_migration_builds_the_two_indexes_0009_drops() -> None:
    """A fresh ``migrate`` never creates and drops ``x_jobs_live_queue_idx`` / ``x_jobs_finished_idx``:
    no migration's SQL builds them, and ``0009`` only drops them where they exist."""
    loader = MigrationLoader(connection)
    names = sorted(name for app, name in loader.disk_migrations if app == "ultimate_jobs")
    assert names[-1] >= "0010"
    for name in names:
        out = StringIO()
        call_command("sqlmigrate", "ultimate_jobs", name, stdout=out)
        built = [line for line in out.getvalue().splitlines() if line.startswith("CREATE")]
        assert not [s for s in built if any(f'"{index}"' in s for index in EARLIER_0008_INDEXES)], (name, built)
    out = StringIO()
    call_command("sqlmigrate", "ultimate_jobs", "0009", stdout=out)
    statements = [line for line in out.getvalue().splitlines() if line and not line.startswith("--")]
    assert statements == [f'DROP INDEX CONCURRENTLY IF EXISTS "{index}";' for index in EARLIER_0008_INDEXES]
