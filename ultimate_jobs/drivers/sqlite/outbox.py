"""The SQLite outbox store: ``x_outbox`` on the jobs database through the ``SQL_OUTBOX_*`` statements of
:mod:`.queries.outbox`.

``stage()`` runs on Django's connection for the jobs database, which inside ``transaction.atomic()`` IS
the caller's transaction, so the row commits or rolls back with the business rows. The relay's
statements run on its own thread's connection. The wake is in-process: a stage in the relay's own
process wakes it when the transaction commits; another process's stage is found by the relay's poll.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.db import IntegrityError, connections, transaction

from ...clock import Clock
from ...conf import job_clock
from ...errors import InvariantError
from ...outbox.store import (
    DEFAULT_CLAIM_LEASE_MS,
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
from .executor import SqliteExecutor
from .queries import outbox as sql
from .rows import dashed, dumps, hex_id, loads, ms, ms_or_none, ts


class SqliteOutboxStore:
    """``x_outbox`` on an SQLite alias. Build it with :func:`sqlite_outbox_store`."""

    name = "sqlite"

    def __init__(
        self, *, alias: str = "default", clock: Clock | None = None, claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS
    ) -> None:
        self.claim_lease_ms = check_claim_lease(claim_lease_ms)
        self.executor = SqliteExecutor(alias)
        self.alias = alias
        self._clock = clock
        self._stage_lock = threading.Lock()
        self._last_staged_ms = 0
        self._wake_lock = threading.Lock()
        self._listeners: list[WakeListener] = []

    @property
    def clock(self) -> Clock:
        return self._clock or job_clock()

    def in_transaction(self) -> bool:
        """An open ``atomic()`` block on the jobs database (or autocommit turned off by hand)."""
        conn = connections[self.alias]
        return bool(conn.in_atomic_block or (conn.connection is not None and not conn.autocommit))

    def _stage_now(self) -> int:
        with self._stage_lock:  # staged_at never steps back in this process: a transaction keeps its order
            now = max(self.clock.now_ms(), self._last_staged_ms)
            self._last_staged_ms = now
            return now

    def stage(self, requests: Sequence[EnqueueRequest]) -> list[OutboxRecord]:
        if not requests:
            return []
        check_staged(requests)
        now = self._stage_now()
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
        try:
            with transaction.atomic(using=self.alias):  # a savepoint: a refused batch leaves the caller's intact
                self.executor.query(sql.SQL_OUTBOX_STAGE, {"rows": dumps(rows), "now": ts(now)})
        except IntegrityError as exc:
            raise InvariantError(
                "an outbox row with one of these ids is already staged; every staged enqueue needs its own id",
                {"ids": [r.id for r in requests]},
            ) from exc
        self._announce_on_commit()
        return [OutboxRecord(id=str(r.id), run_id=str(r.run_id), request=r, staged_at_ms=now) for r in requests]

    def claim(self, *, claimant: str, limit: int) -> list[OutboxRecord]:
        check_limit(limit)
        token = f"{claimant}:{uuid.uuid4().hex[:12]}"
        now = self.clock.now_ms()
        with self.executor.write():
            ids = [r[0] for r in self.executor.query(
                sql.SQL_OUTBOX_CLAIMABLE, {"lapsed": ts(now - self.claim_lease_ms), "limit": limit}
            )]  # fmt: skip
            rows = (
                self.executor.query(sql.SQL_OUTBOX_STAMP, {"ids": dumps(ids), "now": ts(now), "claimant": token})
                if ids
                else []
            )
        records = [_record(row) for row in rows]
        records.sort(key=lambda r: (r.staged_at_ms, hex_id(r.id) or r.id))
        return records

    def _ids(self, statement: str, params: dict[str, Any], ids: Sequence[str]) -> frozenset[str]:
        hexed = [h for h in (hex_id(i) for i in ids) if h is not None]
        if not hexed:
            return frozenset()
        return frozenset(dashed(r[0]) for r in self.executor.query(statement, {**params, "ids": dumps(hexed)}))

    def release(self, ids: Sequence[str], *, claimed_by: str, error: str | None = None) -> frozenset[str]:
        return self._ids(sql.SQL_OUTBOX_RELEASE, {"claimed_by": claimed_by, "error": error}, ids)

    def mark_published(self, ids: Sequence[str], *, claimed_by: str) -> frozenset[str]:
        params = {"claimed_by": claimed_by, "now": ts(self.clock.now_ms())}
        return self._ids(sql.SQL_OUTBOX_MARK_PUBLISHED, params, ids)

    def set_aside(self, ids: Sequence[str], *, claimed_by: str, error: str) -> frozenset[str]:
        params = {"claimed_by": claimed_by, "error": error, "now": ts(self.clock.now_ms())}
        return self._ids(sql.SQL_OUTBOX_SET_ASIDE, params, ids)

    def backlog(self) -> int:
        return self.stats().pending

    def stats(self) -> OutboxStats:
        pending, failed, oldest = self.executor.query(sql.SQL_OUTBOX_STATS)[0]
        return OutboxStats(int(pending), int(failed), ms_or_none(oldest))

    def failed(self, *, limit: int) -> list[FailedOutboxRow]:
        rows = self.executor.query(sql.SQL_OUTBOX_FAILED, {"limit": check_limit(limit)})
        return [FailedOutboxRow(dashed(r[0]), r[1], r[2], ms(r[3]), ms(r[4]), r[5]) for r in rows]

    def retry_failed(self, ids: Sequence[str]) -> frozenset[str]:
        landed = self._ids(sql.SQL_OUTBOX_RETRY_FAILED, {}, ids)
        if landed:
            self._announce_on_commit()
        return landed

    def remove_failed(self, ids: Sequence[str]) -> frozenset[str]:
        return self._ids(sql.SQL_OUTBOX_REMOVE_FAILED, {}, ids)

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

    def _announce_on_commit(self) -> None:
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
        from ...conf import jobs_settings

        alias = jobs_settings().database
    return SqliteOutboxStore(alias=alias, clock=clock, claim_lease_ms=claim_lease_ms)


def _record(row: Sequence[Any]) -> OutboxRecord:
    return OutboxRecord(
        id=dashed(row[0]),
        run_id=dashed(row[1]),
        request=request_from_json(loads(row[2])),
        staged_at_ms=ms(row[3]),
        claimed_by=row[4],
        claimed_at_ms=ms_or_none(row[5]),
    )
