"""The Postgres outbox store: ``x_outbox`` through the ``SQL_OUTBOX_*`` statements.

``stage()`` runs on ``tx_executor`` — Django's connection for the jobs database, which inside
``transaction.atomic()`` IS the caller's transaction, so the row commits or rolls back with the
business rows. ``claim()``, ``release()`` and ``mark_published()`` run on ``executor`` (the relay's
own connection). The store knows nothing of the driver the relay publishes to: a Postgres outbox in
front of a Redis queue is the same store.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.db import IntegrityError, connections

from ...clock import Clock, system_clock
from ...conf import job_clock
from ...errors import InvariantError
from ...outbox.store import (
    DEFAULT_CLAIM_LEASE_MS,
    OUTBOX_WAKE_CHANNEL,
    FailedOutboxRow,
    OutboxRecord,
    OutboxStats,
    WakeListener,
    check_claim_lease,
    check_limit,
    check_staged,
    request_from_json,
    request_to_json,
)
from ..base import EnqueueRequest
from .driver import is_uuid
from .executor import Executor, django_executor, from_jsonb, jsonb
from .queries import outbox as sql


class PostgresOutboxStore:
    """``x_outbox`` over two executors. Build it with :func:`postgres_outbox_store`."""

    name = "postgres"

    def __init__(
        self,
        *,
        executor: Executor,
        tx_executor: Executor,
        clock: Clock | None = None,
        claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS,
    ) -> None:
        self.claim_lease_ms = check_claim_lease(claim_lease_ms)
        self.executor = executor
        self.tx_executor = tx_executor
        self.alias = tx_executor.alias
        self._clock = clock
        self._stage_lock = threading.Lock()
        self._last_staged_ms = 0
        self._wake_lock = threading.Lock()
        self._listeners: list[WakeListener] = []
        self._wake: Any = None  # a QueueWake while anyone subscribes

    @property
    def clock(self) -> Clock:
        return self._clock or job_clock()

    def in_transaction(self) -> bool:
        """An open ``atomic()`` block on the jobs database (or autocommit turned off by hand)."""
        conn = connections[self.alias]
        return bool(conn.in_atomic_block or (conn.connection is not None and not conn.autocommit))

    def _stage_now(self) -> int:
        # staged_at never steps back in this process, so a transaction's rows keep their stage order
        # even when the wall clock is corrected backwards between two enqueues.
        with self._stage_lock:
            now = max(self.clock.now_ms(), self._last_staged_ms)
            self._last_staged_ms = now
            return now

    def stage(self, requests: Sequence[EnqueueRequest]) -> list[OutboxRecord]:
        if not requests:
            return []
        check_staged(requests)
        now = self._stage_now()
        rows = [
            {"ord": i, "id": r.id, "run_id": r.run_id, "name": r.name, "queue": r.queue, "request": request_to_json(r)}
            for i, r in enumerate(requests)
        ]
        try:
            self.tx_executor.query(sql.SQL_OUTBOX_STAGE, {"rows": jsonb(rows), "now": now})
        except IntegrityError as exc:
            raise InvariantError(
                "an outbox row with one of these ids is already staged; every staged enqueue needs its own id",
                {"ids": [r.id for r in requests]},
            ) from exc
        return [
            OutboxRecord(id=str(r.id), run_id=str(r.run_id), request=r, staged_at_ms=now)  # check_staged: both set
            for r in requests
        ]

    def claim(self, *, claimant: str, limit: int) -> list[OutboxRecord]:
        check_limit(limit)
        token = f"{claimant}:{uuid.uuid4().hex[:12]}"
        params = {"limit": limit, "lease": self.claim_lease_ms, "claimant": token, "now": self.clock.now_ms()}
        return [_record(row) for row in self.executor.query(sql.SQL_OUTBOX_CLAIM, params)]

    def release(self, ids: Sequence[str], *, claimed_by: str, error: str | None = None) -> frozenset[str]:
        return self._ids(sql.SQL_OUTBOX_RELEASE, {"ids": _uuids(ids), "claimed_by": claimed_by, "error": error})

    def mark_published(self, ids: Sequence[str], *, claimed_by: str) -> frozenset[str]:
        params = {"ids": _uuids(ids), "claimed_by": claimed_by, "now": self.clock.now_ms()}
        return self._ids(sql.SQL_OUTBOX_MARK_PUBLISHED, params)

    def set_aside(self, ids: Sequence[str], *, claimed_by: str, error: str) -> frozenset[str]:
        params = {"ids": _uuids(ids), "claimed_by": claimed_by, "error": error, "now": self.clock.now_ms()}
        return self._ids(sql.SQL_OUTBOX_SET_ASIDE, params)

    def backlog(self) -> int:
        return int(self.executor.query(sql.SQL_OUTBOX_BACKLOG)[0][0])

    def stats(self) -> OutboxStats:
        pending, failed, oldest = self.executor.query(sql.SQL_OUTBOX_STATS)[0]
        return OutboxStats(int(pending), int(failed), int(oldest) if oldest is not None else None)

    def failed(self, *, limit: int) -> list[FailedOutboxRow]:
        rows = self.executor.query(sql.SQL_OUTBOX_FAILED, {"limit": check_limit(limit)})
        return [FailedOutboxRow(str(r[0]), r[1], r[2], int(r[3]), int(r[4]), r[5]) for r in rows]

    def retry_failed(self, ids: Sequence[str]) -> frozenset[str]:
        return self._ids(sql.SQL_OUTBOX_RETRY_FAILED, {"ids": _uuids(ids)})

    def remove_failed(self, ids: Sequence[str]) -> frozenset[str]:
        return self._ids(sql.SQL_OUTBOX_REMOVE_FAILED, {"ids": _uuids(ids)})

    def purge_published(self, *, before_ms: int, limit: int) -> int:
        params = {"before": before_ms, "limit": check_limit(limit)}
        return int(self.executor.query(sql.SQL_OUTBOX_PURGE_PUBLISHED, params)[0][0])

    def _ids(self, statement: str, params: dict[str, Any]) -> frozenset[str]:
        if not params["ids"]:
            return frozenset()
        return frozenset(str(r[0]) for r in self.executor.query(statement, params))

    # -- the wake ------------------------------------------------------------------------------

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        """Hear other processes' stages (LISTEN x_outbox_wake, proven by a probe through the pool). The
        session starts with the first subscriber — the relay — and stops with the last; answers an
        unsubscribe."""
        from .wake import conninfo_for, start_queue_wake

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
) -> PostgresOutboxStore:
    """The Postgres outbox store. ``tx_executor`` is what makes it transactional: ``stage()`` runs on
    it — by default Django's connection for ``alias`` (``ULTIMATE_JOBS['DATABASE']``), the caller's own
    inside ``atomic()``. ``executor`` runs the relay's statements (by default the same alias).
    ``claim_lease_ms`` (a positive whole number of ms, default 30 s; anything else is ``X_INVARIANT``)
    is how long the rows of a relay that died mid-batch wait before another relay may take them.

    >>> store = postgres_outbox_store(alias="default", claim_lease_ms=30_000)
    """
    check_claim_lease(claim_lease_ms)
    if alias is None:
        from ...conf import jobs_settings

        alias = tx_executor.alias if tx_executor is not None else jobs_settings().database
    tx = tx_executor or django_executor(alias)
    return PostgresOutboxStore(executor=executor or tx, tx_executor=tx, clock=clock, claim_lease_ms=claim_lease_ms)


def _uuids(ids: Sequence[str]) -> list[str]:
    """The ids that can name a row (anything else names none: no statement needs to say so)."""
    return [i for i in ids if is_uuid(i)]


def _record(row: Sequence[Any]) -> OutboxRecord:
    return OutboxRecord(
        id=str(row[0]),
        run_id=str(row[1]),
        request=request_from_json(from_jsonb(row[2])),
        staged_at_ms=int(row[3]),
        claimed_by=row[4],
        claimed_at_ms=int(row[5]) if row[5] is not None else None,
    )
