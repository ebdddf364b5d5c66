"""A role thread's Django connections between jobs (``release_stale_connections``, run after every job on
each slot): a transaction a body left open is rolled back and forgotten — on a connection the thread had
from the start and on one it first opened later — and the next query dials a fresh session."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction

from tests.helpers import eventually
from ultimate_jobs.runtime.dbconn import release_stale_connections

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WAIT = 5.0


def on_a_thread(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` on a new thread (a new set of Django connections) and return what it reports."""
    report: dict[str, Any] = {}

    def run() -> None:
        try:
            report.update(fn())
        except BaseException as exc:  # reported to the test thread, which fails on it
            report["error"] = repr(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive() and "error" not in report, report
    return report


def backend_pid() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    return int(pid)


def leak_a_transaction() -> int:
    """What a careless body does: enter ``atomic()``, write, and return without leaving the block."""
    transaction.atomic().__enter__()
    with connections["default"].cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE IF NOT EXISTS leak_probe (n int)")
    return backend_pid()


def session_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        (count,) = cursor.fetchone()
    return bool(count)


@pytest.mark.parametrize("opened", ["before the first check", "after the first check"])
def test_a_leaked_transaction_is_closed_and_the_next_query_gets_a_fresh_session(opened: str) -> None:
    def slot() -> dict[str, Any]:
        if opened == "after the first check":
            release_stale_connections()  # the thread's first check, before it ever touched the database
        leaked = leak_a_transaction()
        release_stale_connections()
        conn = connections["default"]
        state = {"connection": conn.connection, "in_atomic_block": conn.in_atomic_block}
        return {"leaked": leaked, "after": state, "next": backend_pid()}

    report = on_a_thread(slot)
    assert report["after"] == {"connection": None, "in_atomic_block": False}
    assert report["next"] != report["leaked"]
    eventually(lambda: not session_alive(report["leaked"]), timeout=WAIT)


def test_a_healthy_connection_is_kept_from_job_to_job() -> None:
    def slot() -> dict[str, Any]:
        release_stale_connections()
        first = backend_pid()
        release_stale_connections()
        return {"first": first, "second": backend_pid()}

    report = on_a_thread(slot)
    assert report["first"] == report["second"]
