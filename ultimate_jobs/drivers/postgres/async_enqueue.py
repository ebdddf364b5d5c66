"""Native async enqueues on Postgres: ``await handle.aenqueue(...)`` from an async view or an ``async def``
job body runs the driver's own enqueue statements on a psycopg ``AsyncConnection`` — no thread hop.

Django's connections are synchronous (its async ORM hops to a thread for every query). An enqueue needs no
ORM: the same plan the sync driver runs (:meth:`~.driver.PostgresDriver.enqueue_plan`) is awaited here on a
connection of the event loop's own to the jobs database — autocommit, its statements prepared once per
connection as the sync driver's are (unless ``ULTIMATE_JOBS["PREPARED_STATEMENTS"]`` is off, or the
database's ``OPTIONS`` name a ``prepare_threshold``). Each loop keeps at most :data:`LOOP_CONNECTIONS` of
them, opened on first use and reused by the loop's later enqueues; they are closed when the loop is
garbage-collected, or at once by :meth:`AsyncEnqueue.close`.

Only code that no sync thread waits on comes here (the router decides: :func:`ultimate_jobs.core.routing.
called_from_sync_code`): Django's transactions are synchronous, so such code holds none, and what it
enqueues commits at once, as a sync enqueue outside ``atomic()`` does.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from django.db import connections

from ...contracts.jobs import Enqueued, EnqueueRequest
from ...errors import DriverUnavailableError
from .executor import IDLE, ONLY_WHEN_ASKED, ROWS
from .rows import needs_transaction
from .wake import conninfo_for

if TYPE_CHECKING:
    from .driver import Plan, PostgresDriver

LOOP_CONNECTIONS = 4
"""The most connections one event loop holds for its enqueues: the enqueues of many concurrent requests
share them, each waiting its turn for one — as many as would keep a small server's cores busy, few enough
that a process's loops never crowd the database's ``max_connections``."""


class _LoopConnections:
    """One event loop's connections: the idle ones, how many are open, and the enqueues waiting for one.
    Touched only from its loop's thread, so it needs no lock: a waiter is a future the next one given back
    resolves."""

    def __init__(self) -> None:
        self.idle: list[psycopg.AsyncConnection[Any]] = []
        self.open = 0
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def wake_one(self) -> None:
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class AsyncEnqueue:
    """The Postgres driver's native async enqueue (``driver.async_enqueue``)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self._driver = driver
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopConnections] = (
            weakref.WeakKeyDictionary()
        )

    async def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """:meth:`~.driver.PostgresDriver.enqueue_many`, awaited on one of the loop's connections (a batch that
        may refuse a member in a transaction of its own there, as the sync driver's)."""
        if not requests:
            return []
        plan = self._driver.enqueue_plan(requests)
        conn = await self._take()
        try:
            if needs_transaction(requests):
                async with conn.transaction():
                    return await self._drive(conn, plan)
            return await self._drive(conn, plan)
        except psycopg.OperationalError as exc:  # the connection failed under the statement
            raise self._unavailable(exc) from exc
        finally:
            await self._give(conn)

    def _unavailable(self, exc: psycopg.OperationalError) -> DriverUnavailableError:
        alias = self._driver.alias
        return DriverUnavailableError(
            f"an async enqueue could not reach the jobs database ({alias!r}): {exc}; check that PostgreSQL is up "
            f"and that DATABASES[{alias!r}] points at it. A statement cut off this way may have committed: "
            "enqueue again with the same idempotency key, which answers the job if it exists",
            {"alias": alias},
        )

    async def _drive(self, conn: psycopg.AsyncConnection[Any], plan: Plan) -> list[Enqueued]:
        prepare = self._prepare()
        try:
            statement = next(plan)
            while True:
                sql, params = statement
                cursor = await conn.execute(sql, params, prepare=prepare)
                answered = cursor.pgresult
                rows = await cursor.fetchall() if answered is not None and answered.status == ROWS else []
                statement = plan.send(rows)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _prepare(self) -> bool | None:
        options = connections.settings[self._driver.alias].get("OPTIONS") or {}
        if "prepare_threshold" in options:
            return None  # the project chose: psycopg's threshold rule
        return self._driver.prepared_statements

    # -- the loop's connections ----------------------------------------------------------------

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        loop = asyncio.get_running_loop()
        held = self._loops.get(loop)
        if held is None:
            held = self._loops[loop] = _LoopConnections()
            weakref.finalize(loop, _finish, held.idle)
        while not held.idle and held.open >= LOOP_CONNECTIONS:
            waiter = loop.create_future()
            held.waiting.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    held.wake_one()  # woken, then cancelled before taking it: the turn passes on
                raise
        if held.idle:
            return held.idle.pop()
        held.open += 1
        try:
            return await self._connect()
        except BaseException:
            held.open -= 1
            held.wake_one()
            raise

    async def _give(self, conn: psycopg.AsyncConnection[Any]) -> None:
        held = self._loops[asyncio.get_running_loop()]
        if conn.closed or conn.broken or conn.info.transaction_status != IDLE:
            held.open -= 1
            held.wake_one()
            await conn.close()
            return
        held.idle.append(conn)
        held.wake_one()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        settings_dict = connections.settings[self._driver.alias]
        threshold = (settings_dict.get("OPTIONS") or {}).get("prepare_threshold", ONLY_WHEN_ASKED)
        try:
            return await psycopg.AsyncConnection.connect(
                conninfo_for(settings_dict), autocommit=True, prepare_threshold=threshold
            )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    async def close(self) -> None:
        """Close the running loop's idle connections (those in use close as they come back)."""
        held = self._loops.pop(asyncio.get_running_loop(), None)
        if held is not None:
            for conn in held.idle:
                await conn.close()
            held.idle.clear()


def _finish(idle: list[psycopg.AsyncConnection[Any]]) -> None:
    """A collected loop's idle connections, closed without it (libpq's own close: no loop needed)."""
    for conn in idle:
        conn.pgconn.finish()
    idle.clear()
