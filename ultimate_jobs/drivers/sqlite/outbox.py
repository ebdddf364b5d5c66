"""The SQLite outbox store: ``x_outbox`` on the jobs database through the ``SQL_OUTBOX_*`` statements of
:mod:`.queries.outbox`.

``stage()`` runs on Django's connection for the jobs database, which inside ``transaction.atomic()`` IS
the caller's transaction, so the row commits or rolls back with the business rows. The relay's
statements run on its own thread's connection. The wake is in-process: a stage in the relay's own
process wakes it when the transaction commits; another process's stage is found by the relay's poll.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.db import connections, transaction

from ...contracts.jobs import EnqueueRequest
from ...contracts.outbox import DEFAULT_CLAIM_LEASE_MS, OutboxRecord, WakeListener, check_limit, request_to_json
from ...core.clock import Clock
from ...core.installed import jobs_database
from ..sql.outbox import SqlOutboxStore
from .executor import SqliteExecutor
from .queries import outbox as sql
from .rows import SQLITE, dumps, hex_id, ts


class SqliteOutboxStore(SqlOutboxStore):
    """``x_outbox`` on an SQLite alias. Build it with :func:`sqlite_outbox_store`."""

    name = "sqlite"
    supports_wake = True
    supports_listen = False  # a stage is heard in its own process only: no wake crosses processes
    dialect = SQLITE
    sql = sql

    def __init__(
        self, *, alias: str = "default", clock: Clock | None = None, claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS
    ) -> None:
        executor = SqliteExecutor(alias)
        super().__init__(executor=executor, tx_executor=executor, clock=clock, claim_lease_ms=claim_lease_ms)

    def _stage(self, requests: Sequence[EnqueueRequest], now: int) -> None:
        rows = [
            {
                "id": hex_id(str(r.id)) or str(r.id),
                "run_id": hex_id(str(r.run_id)) or str(r.run_id),
                "name": r.name,
                "queue": r.queue,
                "request": request_to_json(r),
            }
            for r in requests
        ]
        with transaction.atomic(using=self.alias):  # a savepoint: a refused batch leaves the caller's intact
            self.executor.query(sql.SQL_OUTBOX_STAGE, {"rows": dumps(rows), "now": ts(now)})

    def claim(self, *, claimant: str, limit: int) -> list[OutboxRecord]:
        check_limit(limit)
        token = self._token(claimant)
        now = self.clock.now_ms()
        with self.executor.write():
            lapsed = {"lapsed": ts(now - self.claim_lease_ms), "limit": limit}
            ids = [r[0] for r in self.executor.query(sql.SQL_OUTBOX_CLAIMABLE, lapsed)]
            stamp = {"ids": dumps(ids), "now": ts(now), "claimant": token}
            rows = self.executor.query(sql.SQL_OUTBOX_STAMP, stamp) if ids else []
        records = [self._record(row) for row in rows]
        records.sort(key=lambda r: (r.staged_at_ms, hex_id(r.id) or r.id))
        return records

    def _id_list(self, ids: Sequence[str]) -> str | None:
        hexed = [h for h in (hex_id(i) for i in ids) if h is not None]
        return dumps(hexed) if hexed else None

    def backlog(self) -> int:
        return self.stats().pending

    def purge_published(self, *, before_ms: int, limit: int) -> int:
        params = {"before": ts(before_ms), "limit": check_limit(limit)}
        return len(self.executor.query(sql.SQL_OUTBOX_PURGE_PUBLISHED, params))

    # -- the wake ------------------------------------------------------------------------------

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        """Hear this process's stages (once their transaction commits); answers an unsubscribe."""
        with self._wake_lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._wake_lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def _staged(self) -> None:
        if not self._listeners:
            return

        def tell() -> None:
            for listener in list(self._listeners):
                listener("")

        if connections[self.alias].in_atomic_block:
            transaction.on_commit(tell, using=self.alias)
        else:
            tell()

    def wake_is_live(self) -> bool:
        """Never: no wake crosses processes on SQLite, so the relay keeps its 2 s idle ceiling."""
        return False


def sqlite_outbox_store(
    *, alias: str | None = None, clock: Clock | None = None, claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS
) -> SqliteOutboxStore:
    """The SQLite outbox store over ``alias`` (``ULTIMATE_JOBS['DATABASE']`` by default): ``stage()`` joins
    the caller's ``atomic()`` block on that database.

    >>> store = sqlite_outbox_store(alias="default", claim_lease_ms=30_000)
    """
    if alias is None:
        alias = jobs_database()
    return SqliteOutboxStore(alias=alias, clock=clock, claim_lease_ms=claim_lease_ms)
