"""Rate limits on the SQLite driver: the cases of tests/postgres/test_rate_limits.py, with this directory's
``any_jobs``."""

from __future__ import annotations

from tests.postgres import test_rate_limits as shared
from tests.sqlite.conftest import shared_tests

globals().update(shared_tests(shared))
