"""``aenqueue``/``aenqueue_many`` on the SQLite driver: tests/postgres/test_async_enqueue.py's bodies over
this folder's ``any_jobs`` (the SQLite driver on committed rows)."""

from __future__ import annotations

from tests.postgres import test_async_enqueue
from tests.postgres.test_async_enqueue import *  # noqa: F403  (its fixtures and helpers)
from tests.sqlite.conftest import adopt_shared_tests

adopt_shared_tests(globals(), test_async_enqueue)
