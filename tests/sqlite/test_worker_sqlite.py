"""The worker role's driver-agnostic tests (tests/postgres/test_worker.py, run there on memory and
Postgres) on the SQLite driver: the same bodies, collected here so ``any_jobs`` is this directory's."""

from __future__ import annotations

from tests.postgres import test_worker as shared
from tests.postgres.test_worker import jobs, make_worker, probe  # noqa: F401  (the fixtures the tests ask for)
from tests.sqlite.conftest import shared_tests

globals().update(shared_tests(shared))
