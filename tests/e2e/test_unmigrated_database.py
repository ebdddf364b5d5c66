"""The role commands on a fresh database nobody has migrated: ``jobs_worker``, ``jobs_scheduler``,
``jobs_relay`` and ``jobs_dev`` each refuse at start with ``X_SCHEMA_NOT_MIGRATED`` and the ``migrate``
command, exit 1 and print no traceback (they used to log ``no such table: x_workers`` every few seconds,
forever); ``check --database default`` warns, ``migrate`` is not stopped by the warning, and after it the
check is quiet and the worker starts.

Real processes on a Postgres database this test creates and drops (named after the suite's test database
and the xdist worker, so no two runs share one) and on an SQLite file in ``tmp_path``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.helpers import REPO, Child

pytestmark = [pytest.mark.e2e]

ROLES = [
    ("jobs_worker",),
    ("jobs_scheduler",),
    ("jobs_relay",),
    ("jobs_dev",),
    ("jobs_dev", "--reload"),
]
REFUSAL_S = 90.0
"""How long a refusing role may take to exit: Django's start-up on a loaded machine, nothing more (a role
that does not refuse runs until it is killed)."""
MANAGE_S = 120.0
"""How long ``migrate`` of every installed app may take on a loaded 2-core machine."""


def own_database_name() -> str:
    """A database name of this run's own: the suite's test database and the xdist worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return f"{os.environ.get('ULTIMATE_JOBS_TEST_DB', 'ultimate_jobs')}_unmigrated_{worker}"


@pytest.fixture
def fresh_postgres() -> Iterator[str]:
    """An empty Postgres database of this test's own on the suite's server, dropped afterwards."""
    base = settings.DATABASES["default"]
    name = own_database_name()
    params = {"host": base["HOST"], "port": base["PORT"], "user": base["USER"], "dbname": "postgres"}
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_env(database: str) -> dict[str, str]:
    """The suite's Postgres settings (DRIVER postgres) on ``database``."""
    return {**_base_env(), "DJANGO_SETTINGS_MODULE": "tests.e2e.pg_settings", "ULTIMATE_JOBS_TEST_DB": database}


def sqlite_env(path: Path) -> dict[str, str]:
    """The suite's SQLite process settings (DRIVER unset: it follows the database to sqlite) on ``path``."""
    return {
        **_base_env(),
        "DJANGO_SETTINGS_MODULE": "tests.sqlite.process_settings",
        "ULTIMATE_JOBS_SQLITE_DB": str(path),
    }


def _base_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
    }


def manage(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=MANAGE_S,
        check=False,
    )


def assert_roles_refuse(env: dict[str, str]) -> None:
    """Every role command, started at once: exit 1, the code and the fix on stderr, no traceback."""
    started = [
        Child(" ".join(argv), [sys.executable, "manage.py", *argv, "--drain-deadline", "2s"], env) for argv in ROLES
    ]
    try:
        for argv, child in zip(ROLES, started, strict=True):
            try:
                code = child.wait(timeout=REFUSAL_S)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{argv} did not refuse to start: {child.describe()}") from None
            child.finished_lines()
            assert code == 1, (argv, child.describe())
            assert "X_SCHEMA_NOT_MIGRATED: " in child.stderr, (argv, child.describe())
            assert "lacks" in child.stderr and "ultimate_jobs migrations (0001_initial … " in child.stderr
            assert "Fix: python manage.py migrate, then start " in child.stderr, (argv, child.describe())
            assert "Traceback" not in child.stderr, (argv, child.describe())
            assert not any(line.startswith(("worker ", "scheduler ", "relay ", "jobs_dev")) for line in child.lines)
    finally:
        for child in started:
            child.close()


def assert_check_warns_and_migrate_runs(env: dict[str, str]) -> None:
    """``check --database default`` warns (exit 0); ``migrate`` applies the migrations despite the
    warning; afterwards the check is quiet."""
    before = manage(env, "check", "--database", "default")
    assert before.returncode == 0, before.stderr
    assert "ultimate_jobs.X_SCHEMA_NOT_MIGRATED" in before.stderr, before.stderr
    assert "HINT: python manage.py migrate" in before.stderr, before.stderr
    quiet = manage(env, "check")  # a database check runs only for the databases Django names
    assert quiet.returncode == 0 and "X_SCHEMA_NOT_MIGRATED" not in quiet.stderr, quiet.stderr
    migrated = manage(env, "migrate", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    after = manage(env, "check", "--database", "default")
    assert after.returncode == 0 and "X_SCHEMA_NOT_MIGRATED" not in after.stderr, after.stderr


def assert_worker_starts(env: dict[str, str]) -> None:
    """On the migrated database the same command gets past the refusal: it prints its start line."""
    worker = Child("jobs_worker", [sys.executable, "manage.py", "jobs_worker"], env)
    try:
        assert worker.line(0, timeout=REFUSAL_S).startswith("worker "), worker.describe()
        assert worker.popen.poll() is None, worker.describe()
    finally:
        worker.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_roles_refuse_an_unmigrated_postgres_database(fresh_postgres: str) -> None:
    env = postgres_env(fresh_postgres)
    assert_roles_refuse(env)
    assert_check_warns_and_migrate_runs(env)
    assert_worker_starts(env)


@pytest.mark.slow
def test_roles_refuse_an_unmigrated_sqlite_file(tmp_path: Path) -> None:
    env = sqlite_env(tmp_path / "fresh.sqlite3")
    assert_roles_refuse(env)
    assert_check_warns_and_migrate_runs(env)
    assert_worker_starts(env)


@pytest.mark.postgres
def test_a_role_that_cannot_reach_its_database_refuses_with_the_code() -> None:
    env = postgres_env(f"{own_database_name()}_absent")  # no such database on the server
    worker = Child("jobs_worker", [sys.executable, "manage.py", "jobs_worker"], env)
    try:
        code = worker.wait(timeout=REFUSAL_S)
        worker.finished_lines()
        assert code == 1, worker.describe()
        assert "X_DRIVER_UNAVAILABLE: jobs_worker cannot reach database 'default'" in worker.stderr, worker.describe()
        assert "Fix: start the database or correct DATABASES['default']" in worker.stderr, worker.describe()
        assert "Traceback" not in worker.stderr, worker.describe()
    finally:
        worker.close()
