"""tests/postgres/test_backfill_cli.py's driver-agnostic tests (run there on memory and Postgres) on the SQLite
driver: the same bodies, collected here so ``any_jobs`` is this directory's."""

from __future__ import annotations

from tests.postgres import test_backfill_cli as shared
from tests.postgres.test_backfill_cli import *  # noqa: F403  (the module's fixtures and helpers)
from tests.sqlite.conftest import adopt_shared_tests

adopt_shared_tests(globals(), shared, using=("any_jobs", "jobs"))
