"""The Postgres outbox store: ``x_outbox`` through the ``SQL_OUTBOX_*`` statements.

``stage()`` runs on ``tx_executor`` — Django's connection for the jobs database, which inside
``transaction.atomic()`` IS the caller's transaction, so the row commits or rolls back with the
business rows. ``claim()``, ``release()`` and ``mark_published()`` run on ``executor`` (the relay's
own connection). The store knows nothing of the driver the relay publishes to: a Postgres outbox in
front of a Redis queue is the same store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections

from ...contracts.jobs import EnqueueRequest
from ...contracts.outbox import (
    DEFAULT_CLAIM_LEASE_MS,
    OUTBOX_WAKE_CHANNEL,
    OutboxRecord,
    WakeListener,
    check_claim_lease,
    check_limit,
    request_to_json,
)
from ...core.clock import Clock, system_clock
from ...core.installed import jobs_database
from ..sql.outbox import SqlOutboxStore
from .executor import Executor, django_executor, jsonb
from .queries import outbox as sql
from .rows import POSTGRES, uuid_or_none
from .wake import conninfo_for, start_queue_wake


class PostgresOutboxStore(SqlOutboxStore):
    """``x_outbox`` over two executors. Build it with :func:`postgres_outbox_store`."""

    name = "postgres"
    supports_wake = True
    supports_listen = True
    dialect = POSTGRES
    sql = sql

    def __init__(
        self,
        *,
        executor: Executor,
        tx_executor: Executor,
        clock: Clock | None = None,
        claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS,
    ) -> None:
        super().__init__(executor=executor, tx_executor=tx_executor, clock=clock, claim_lease_ms=claim_lease_ms)
        self._wake: Any = None  # a QueueWake while anyone subscribes

    def _stage(self, requests: Sequence[EnqueueRequest], now: int) -> None:
        rows = [
            {"ord": i, "id": r.id, "run_id": r.run_id, "name": r.name, "queue": r.queue, "request": request_to_json(r)}
            for i, r in enumerate(requests)
        ]
        self.tx_executor.query(sql.SQL_OUTBOX_STAGE, {"rows": jsonb(rows), "now": now}, binding="prepared")

    def claim(self, *, claimant: str, limit: int) -> list[OutboxRecord]:
        check_limit(limit)
        params = {
            "limit": limit,
            "lease": self.claim_lease_ms,
            "claimant": self._token(claimant),
            "now": self.clock.now_ms(),
        }
        return [self._record(row) for row in self.executor.query(sql.SQL_OUTBOX_CLAIM, params)]

    def _id_list(self, ids: Sequence[str]) -> list[str] | None:
        found = [i for i in ids if uuid_or_none(i) is not None]
        return found or None

    def backlog(self) -> int:
        return int(self.executor.query(sql.SQL_OUTBOX_BACKLOG)[0][0])

    def purge_published(self, *, before_ms: int, limit: int) -> int:
        params = {"before": before_ms, "limit": check_limit(limit)}
        return int(self.executor.query(sql.SQL_OUTBOX_PURGE_PUBLISHED, params)[0][0])

    # -- the wake ------------------------------------------------------------------------------

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        """Hear other processes' stages (LISTEN x_outbox_wake, proven by a probe through the pool). The
        session starts with the first subscriber — the relay — and stops with the last; answers an
        unsubscribe."""
        with self._wake_lock:
            self._listeners.append(listener)
            if self._wake is None:
                self._wake = start_queue_wake(
                    conninfo=conninfo_for(connections[self.alias].settings_dict),
                    probe=outbox_probe(self.alias),
                    on_wake=self._announce,
                    clock=system_clock(),  # the proof deadline is wall time, whatever clock the store reads
                    channel=OUTBOX_WAKE_CHANNEL,
                )

        def unsubscribe() -> None:
            with self._wake_lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
                wake = self._wake if not self._listeners else None
                if wake is not None:
                    self._wake = None
            if wake is not None:
                wake.stop()

        return unsubscribe

    def _announce(self, payload: str) -> None:
        for listener in list(self._listeners):
            listener(payload)

    def wake_is_live(self) -> bool:
        """Whether the LISTEN session is proven (the relay then raises its idle ceiling to 5 s)."""
        wake = self._wake
        return wake is not None and bool(wake.is_live())


def outbox_probe(alias: str) -> Callable[[str], None]:
    """A probe that runs ``SQL_OUTBOX_WAKE_PROBE`` on ``connections[alias]`` (the pool stages travel
    through), closing the wake thread's connection after, as :func:`~.wake.pool_probe`."""

    def probe(payload: str) -> None:
        connection = connections[alias]
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql.SQL_OUTBOX_WAKE_PROBE, {"payload": payload})
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return probe


def postgres_outbox_store(
    executor: Executor | None = None,
    tx_executor: Executor | None = None,
    *,
    alias: str | None = None,
    clock: Clock | None = None,
    claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS,
    prepared: bool = True,
) -> PostgresOutboxStore:
    """The Postgres outbox store. ``tx_executor`` is what makes it transactional: ``stage()`` runs on
    it — by default Django's connection for ``alias`` (``ULTIMATE_JOBS['DATABASE']``), the caller's own
    inside ``atomic()``. ``executor`` runs the relay's statements (by default the same alias).
    ``claim_lease_ms`` (a positive whole number of ms, default 30 s; anything else is ``X_INVARIANT``)
    is how long the rows of a relay that died mid-batch wait before another relay may take them.
    ``prepared=False`` (``ULTIMATE_JOBS["PREPARED_STATEMENTS"]``) prepares no statement of the stage.

    >>> store = postgres_outbox_store(alias="default", claim_lease_ms=30_000)
    """
    check_claim_lease(claim_lease_ms)
    if alias is None:
        alias = tx_executor.alias if tx_executor is not None else jobs_database()
    tx = tx_executor or django_executor(alias, prepared=prepared)
    return PostgresOutboxStore(executor=executor or tx, tx_executor=tx, clock=clock, claim_lease_ms=claim_lease_ms)
