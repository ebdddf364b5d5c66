"""Rate limits on the SQLite driver: the cases of tests/postgres/test_rate_limits.py, with this directory's
``any_jobs`` — but the take queued on a Postgres row lock, which is about Postgres' lock (SQLite's write
lock has its own case in test_sqlite_specific.py)."""

from __future__ import annotations

from tests.postgres import test_rate_limits as shared
from tests.sqlite.conftest import shared_tests

globals().update(
    shared_tests(
        shared,
        leave_out=(
            "test_a_postgres_take_queued_on_the_keys_row_lock_hands_out_no_instant_that_passed_while_it_waited",
        ),
    )
)
