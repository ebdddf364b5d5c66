"""The dashboard's read on the SQLite driver: the ``any_jobs`` cases of tests/postgres/test_dashboard.py (its
CLI and admin cases run on Postgres; they draw the same read)."""

from __future__ import annotations

from tests.postgres import test_dashboard as shared
from tests.sqlite.conftest import shared_tests

globals().update(shared_tests(shared, using=("any_jobs",)))
