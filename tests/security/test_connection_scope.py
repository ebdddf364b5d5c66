"""The scope holds on every connection a run touches, whichever thread holds it and whatever it held before.

A run's scope lives in a context variable, which follows the code into other threads — asgiref's
executor under ``sync_to_async``, a pool's thread running work in the run's context — whose connections
were opened outside any scope, or were left by another org's run, or are sessions a connection pool
hands from one thread to the next. Each test primes such a connection with another scope, then runs
org A's work on it and asks the session two things: the scope its settings carry (which must be org A's,
whatever the role) and, as the application's role under FORCE row-level security, the secrets raw SQL
can read there (which must be org A's alone).

A thread started inside a run carries no context at all: it acts as a run with no org.

Each test runs twice, as the other suites here do: as the superuser, where Postgres skips the policies
and only the Python guard refuses (and the session settings are still asserted), and with every
connection acting as the application's role.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, transaction

from tests.secapp.models import Item
from tests.security.attacks import A, B, denied
from ultimate_jobs.core.scope import Actor, acting_as, cross_tenant
from ultimate_jobs.drivers.postgres.executor import django_executor
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.runtime.dbconn import close_thread_connections

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

T = TypeVar("T")

ONLY_A = ["secret of org-A"]
EVERY = ["secret of org-A", "secret of org-B"]


def session() -> tuple[tuple[str, str], list[str]]:
    """What this thread's session carries: its scope settings, and the item secrets raw SQL reads there."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('ultimate_jobs.tenant_scope', true), current_setting('ultimate_jobs.org_id', true)"
        )
        row = cursor.fetchone()
        assert row is not None
        cursor.execute("SELECT secret FROM secapp_item ORDER BY secret")
        return (str(row[0] or ""), str(row[1] or "")), [secret for (secret,) in cursor.fetchall()]


def assert_acts_as(seen: tuple[tuple[str, str], list[str]], setting: tuple[str, str], secrets: list[str], guard: str):
    """The session carried ``setting``; under row-level security raw SQL read ``secrets`` and no more."""
    assert seen[0] == setting
    if guard == "row-level security":
        assert seen[1] == secrets


class Lane:
    """One long-lived thread with its own Django connection, like a pool's: work handed to it runs in
    the caller's context (``contextvars.copy_context().run``), as a context-carrying pool runs it."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pool.submit(lambda: None).result()  # the thread starts here, outside any scope

    def run(self, fn: Callable[[], T]) -> T:
        return self._pool.submit(contextvars.copy_context().run, fn).result()

    def close(self) -> None:
        self._pool.submit(close_thread_connections).result()
        self._pool.shutdown()


@pytest.fixture
def lanes() -> Iterator[Callable[[str], Lane]]:
    made: list[Lane] = []

    def lane(name: str) -> Lane:
        made.append(Lane(name))
        return made[-1]

    yield lane
    for each in made:
        each.close()


def on_asgiref_executor(fn: Callable[[], T]) -> T:
    """``fn`` through ``sync_to_async`` from an event loop with no sync caller above it: asgiref runs it
    on its one process-wide executor thread, in a copy of the caller's context."""

    async def call() -> T:
        return await sync_to_async(fn)()

    return asyncio.run(call())


@pytest.fixture
def asgiref_executor() -> Iterator[Callable[[Callable[[], T]], T]]:
    """asgiref's executor thread; its connections are closed after the test (the thread lives on)."""
    yield on_asgiref_executor
    on_asgiref_executor(close_thread_connections)


# -- 1. other threads' connections take the run's scope --------------------------------------------


@pytest.mark.parametrize("left_by", ["code outside any scope", "org B's run"])
def test_sync_to_async_on_asgiref_executor_acts_under_the_run_org(
    rows: dict[str, Any], guard: str, asgiref_executor: Any, left_by: str
) -> None:
    if left_by == "org B's run":
        with acting_as(Actor(org_id=B)):
            assert_acts_as(asgiref_executor(session), ("org", B), ["secret of org-B"], guard)
    else:
        assert_acts_as(asgiref_executor(session), ("all", ""), EVERY, guard)
    with acting_as(Actor(org_id=A)):
        assert_acts_as(asgiref_executor(session), ("org", A), ONLY_A, guard)
    assert_acts_as(asgiref_executor(session), ("all", ""), EVERY, guard)  # and wider again after the run


def test_values_aiterator_on_a_stale_executor_connection_is_denied(
    rows: dict[str, Any], guard: str, asgiref_executor: Any
) -> None:
    """The issue's read: org B's totals through ``values().aiterator()``, on asgiref's executor thread
    whose connection was opened outside any scope."""
    asgiref_executor(session)

    async def totals() -> list[dict[str, Any]]:
        return [row async for row in Item.objects.values("secret", "total").aiterator()]

    denied(lambda: asyncio.run(totals()), guard, rows)


def test_a_pool_thread_left_by_org_b_acts_under_org_a(rows: dict[str, Any], guard: str, lanes: Any) -> None:
    lane = lanes("pool")
    with acting_as(Actor(org_id=B)):
        assert_acts_as(lane.run(session), ("org", B), ["secret of org-B"], guard)
    with acting_as(Actor(org_id=A)):
        assert_acts_as(lane.run(session), ("org", A), ONLY_A, guard)
        assert_acts_as(lane.run(lambda: cross_tenant("a support fix", session)), ("all", ""), EVERY, guard)
        assert_acts_as(lane.run(session), ("org", A), ONLY_A, guard)


@pytest.fixture
def one_pooled_session(rows: dict[str, Any], guard: str) -> Iterator[None]:
    """Django's own connection pool (``OPTIONS["pool"]``, psycopg_pool) on the test database, holding ONE
    server session: every thread that connects meanwhile is handed that session, with whatever its last
    user left in it — as a deployment's pool hands sessions from one request or run to the next. (After
    the rows and the role are set up; the test's own thread holds no session while it lasts.)"""
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    connection.settings_dict["OPTIONS"] = {**options, "pool": {"min_size": 1, "max_size": 1, "timeout": 30}}
    try:
        yield
    finally:
        connection.close()
        connection.close_pool()  # type: ignore[attr-defined]  # the postgresql backend's, Django 5.1+
        connection.settings_dict["OPTIONS"] = options


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
        assert row is not None
        return int(row[0])


def given_back(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn``, then this thread's connection closed: a pooled one goes back to the pool, settings kept."""

    def run() -> T:
        try:
            return fn()
        finally:
            connection.close()

    return run


def test_a_pooled_session_left_by_org_b_serves_org_a_under_org_a(
    rows: dict[str, Any], guard: str, one_pooled_session: None, lanes: Any, asgiref_executor: Any
) -> None:
    """A real pool (Django's ``OPTIONS["pool"]``) of one session, taken in turn by org B's run and org A's,
    on two threads and on asgiref's executor: each run's statements act under its own org, on the same
    server session."""
    first, second = lanes("first"), lanes("second")
    with acting_as(Actor(org_id=B)):
        pid = first.run(given_back(backend_pid))
        assert_acts_as(first.run(given_back(session)), ("org", B), ["secret of org-B"], guard)
    with acting_as(Actor(org_id=A)):
        assert second.run(given_back(backend_pid)) == pid  # the pool handed org A the session org B left
        assert_acts_as(second.run(given_back(session)), ("org", A), ONLY_A, guard)
    with acting_as(Actor(org_id=B)):  # back on the thread that last set org B: the session now carries org A
        assert_acts_as(first.run(given_back(session)), ("org", B), ["secret of org-B"], guard)
        assert asgiref_executor(given_back(backend_pid)) == pid
        assert_acts_as(asgiref_executor(given_back(session)), ("org", B), ["secret of org-B"], guard)
    with acting_as(Actor(org_id=A)):
        assert_acts_as(asgiref_executor(given_back(session)), ("org", A), ONLY_A, guard)
    assert_acts_as(first.run(given_back(session)), ("all", ""), EVERY, guard)  # outside any run: every row


def test_a_thread_started_inside_a_run_acts_as_a_run_with_no_org(rows: dict[str, Any], guard: str) -> None:
    """A ``threading.Thread`` carries no context: started inside org A's run, it does not run "outside
    any scope" (every row) but as a run with no org — no scoped row, and the ORM says what to do."""
    seen: dict[str, Any] = {}

    def in_the_thread() -> None:
        try:
            seen["session"] = session()
            try:
                seen["orm"] = list(Item.objects.values_list("secret", flat=True))
            except UltimateError as error:
                seen["orm"] = error
        finally:
            close_thread_connections()

    def with_the_run_context() -> None:
        try:
            seen["carried"] = session()
        finally:
            close_thread_connections()

    with acting_as(Actor(org_id=A)):
        plain = threading.Thread(target=in_the_thread)
        plain.start()
        plain.join()
        carrying = threading.Thread(target=contextvars.copy_context().run, args=(with_the_run_context,))
        carrying.start()
        carrying.join()
    assert_acts_as(seen["session"], ("none", ""), [], guard)
    refusal = seen["orm"]
    assert isinstance(refusal, UltimateError) and refusal.code == "X_TENANCY_ACTOR_ORG_REQUIRED", refusal
    assert "contextvars.copy_context().run" in refusal.message
    assert_acts_as(seen["carried"], ("org", A), ONLY_A, guard)
    # a thread started outside any scope is outside any scope, as before
    outside: dict[str, Any] = {}

    def unscoped() -> None:
        try:
            outside["session"] = session()
        finally:
            close_thread_connections()

    thread = threading.Thread(target=unscoped)
    thread.start()
    thread.join()
    assert_acts_as(outside["session"], ("all", ""), EVERY, guard)


# -- transactions: what a rollback undoes, the session setting follows ------------------------------


def test_a_savepoint_rolled_back_inside_a_run_does_not_widen_it(rows: dict[str, Any], guard: str) -> None:
    """A savepoint taken outside the run, rolled back by hand inside it (``transaction.savepoint_rollback``):
    the setting made after the savepoint is undone with it, and the next statement sets it again."""
    with transaction.atomic():
        assert_acts_as(session(), ("all", ""), EVERY, guard)
        sid = connection.savepoint()  # transaction.savepoint() on 5.2, savepoint_create() on 6.1
        with acting_as(Actor(org_id=A)):
            assert_acts_as(session(), ("org", A), ONLY_A, guard)
            transaction.savepoint_rollback(sid)
            assert_acts_as(session(), ("org", A), ONLY_A, guard)
        assert_acts_as(session(), ("all", ""), EVERY, guard)
    with acting_as(Actor(org_id=A)):
        assert_acts_as(session(), ("org", A), ONLY_A, guard)


def test_a_transaction_the_driver_begins_is_not_taken_for_an_earlier_one(rows: dict[str, Any], guard: str) -> None:
    """A setting made for one transaction ends with it: a later transaction whose first statement is
    the Postgres driver's own (sent past Django's cursor) starts from the session's setting again."""
    executor = django_executor("default")
    with transaction.atomic():
        assert_acts_as(session(), ("all", ""), EVERY, guard)
        with acting_as(Actor(org_id=A)):
            assert_acts_as(session(), ("org", A), ONLY_A, guard)  # made for this transaction only
    with acting_as(Actor(org_id=A)), transaction.atomic():
        executor.query("SELECT 1", binding="server")  # begins the transaction, past Django's cursor
        assert_acts_as(session(), ("org", A), ONLY_A, guard)
    assert_acts_as(session(), ("all", ""), EVERY, guard)
