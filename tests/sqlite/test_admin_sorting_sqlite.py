"""The job lists' sorting and count on the SQLite driver: the ``any_jobs`` cases of
tests/postgres/test_admin_sorting.py, collected here so ``any_jobs`` is this directory's."""

from __future__ import annotations

from tests.postgres import test_admin_sorting as shared
from tests.postgres.test_admin_sorting import *  # noqa: F403  (the module's fixtures and helpers)
from tests.sqlite.conftest import adopt_shared_tests

adopt_shared_tests(globals(), shared)
