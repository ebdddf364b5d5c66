"""The outbox store both SQL backends share: ``x_outbox`` over the backend's executor, dialect and the
``SQL_OUTBOX_*`` statements of its catalogue. ``stage()`` runs on Django's connection for the jobs
database, which inside ``transaction.atomic()`` IS the caller's transaction, so the row commits or rolls
back with the business rows. A backend's store adds how it stages a batch, claims one, purges, and wakes
the relay."""

from __future__ import annotations

import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from django.db import IntegrityError, connections

from ...contracts.jobs import EnqueueRequest
from ...contracts.outbox import (
    DEFAULT_CLAIM_LEASE_MS,
    FailedOutboxRow,
    OutboxRecord,
    OutboxStats,
    WakeListener,
    check_claim_lease,
    check_limit,
    check_staged,
    request_from_json,
)
from ...core.clock import Clock
from ...core.installed import job_clock
from ...errors import InvariantError
from .dialect import Dialect
from .rows import row_class

OUTBOX_FIELDS = ("id", "run_id", "request", "staged_at", "claimed_by", "claimed_at")
OutboxRow = row_class("OutboxRow", OUTBOX_FIELDS)


class SqlOutboxStore(ABC):
    """``x_outbox`` on the jobs database ``alias``. ``dialect`` and ``sql`` (the catalogue module) name the
    backend; ``executor`` runs the relay's statements, ``tx_executor`` the stage."""

    name: str
    dialect: Dialect
    sql: ModuleType

    def __init__(self, *, executor: Any, tx_executor: Any, clock: Clock | None, claim_lease_ms: int) -> None:
        self.claim_lease_ms = check_claim_lease(claim_lease_ms)
        self.executor = executor
        self.tx_executor = tx_executor
        self.alias: str = tx_executor.alias
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
        # staged_at never steps back in this process, so a transaction's rows keep their stage order
        # even when the wall clock is corrected backwards between two enqueues.
        with self._stage_lock:
            now = max(self.clock.now_ms(), self._last_staged_ms)
            self._last_staged_ms = now
            return now

    # -- stage ---------------------------------------------------------------------------------

    def stage(self, requests: Sequence[EnqueueRequest]) -> list[OutboxRecord]:
        if not requests:
            return []
        check_staged(requests)
        now = self._stage_now()
        try:
            self._stage(requests, now)
        except IntegrityError as exc:
            raise InvariantError(
                "an outbox row with one of these ids is already staged; every staged enqueue needs its own id",
                {"ids": [r.id for r in requests]},
            ) from exc
        self._staged()
        return [
            OutboxRecord(id=str(r.id), run_id=str(r.run_id), request=r, staged_at_ms=now)  # check_staged: both set
            for r in requests
        ]

    @abstractmethod
    def _stage(self, requests: Sequence[EnqueueRequest], now: int) -> None:
        """Write the rows of ``requests``, staged at ``now``, in the caller's transaction."""

    def _staged(self) -> None:
        """Rows became claimable: tell this process's relay, where the backend's statements do not."""
        return None

    # -- the relay's statements ----------------------------------------------------------------

    def _token(self, claimant: str) -> str:
        """A claim's own token: the claimant and a random suffix, so a relay's two batches never mix."""
        return f"{claimant}:{uuid.uuid4().hex[:12]}"

    def _record(self, row: tuple[Any, ...]) -> OutboxRecord:
        named = OutboxRow._make(row)
        d = self.dialect
        return OutboxRecord(
            id=d.uid(named.id),
            run_id=d.uid(named.run_id),
            request=request_from_json(d.json(named.request)),
            staged_at_ms=d.instant(named.staged_at),
            claimed_by=named.claimed_by,
            claimed_at_ms=d.instant_or_none(named.claimed_at),
        )

    @abstractmethod
    def _id_list(self, ids: Sequence[str]) -> Any:
        """``ids`` as a list parameter, the ones that cannot name a row left out; ``None`` when none can."""

    def _ids(self, statement: str, params: dict[str, Any], ids: Sequence[str]) -> frozenset[str]:
        found = self._id_list(ids)
        if found is None:
            return frozenset()
        return frozenset(self.dialect.uid(r[0]) for r in self.executor.query(statement, {**params, "ids": found}))

    def release(self, ids: Sequence[str], *, claimed_by: str, error: str | None = None) -> frozenset[str]:
        return self._ids(self.sql.SQL_OUTBOX_RELEASE, {"claimed_by": claimed_by, "error": error}, ids)

    def mark_published(self, ids: Sequence[str], *, claimed_by: str) -> frozenset[str]:
        params = {"claimed_by": claimed_by, "now": self.dialect.at(self.clock.now_ms())}
        return self._ids(self.sql.SQL_OUTBOX_MARK_PUBLISHED, params, ids)

    def set_aside(self, ids: Sequence[str], *, claimed_by: str, error: str) -> frozenset[str]:
        params = {"claimed_by": claimed_by, "error": error, "now": self.dialect.at(self.clock.now_ms())}
        return self._ids(self.sql.SQL_OUTBOX_SET_ASIDE, params, ids)

    def stats(self) -> OutboxStats:
        pending, failed, oldest = self.executor.query(self.sql.SQL_OUTBOX_STATS)[0]
        return OutboxStats(int(pending), int(failed), self.dialect.instant_or_none(oldest))

    def failed(self, *, limit: int) -> list[FailedOutboxRow]:
        rows = self.executor.query(self.sql.SQL_OUTBOX_FAILED, {"limit": check_limit(limit)})
        d = self.dialect
        return [
            FailedOutboxRow(d.uid(row_id), name, queue, d.instant(staged), d.instant(failed_at), error)
            for row_id, name, queue, staged, failed_at, error in rows
        ]

    def retry_failed(self, ids: Sequence[str]) -> frozenset[str]:
        landed = self._ids(self.sql.SQL_OUTBOX_RETRY_FAILED, {}, ids)
        if landed:
            self._staged()
        return landed

    def remove_failed(self, ids: Sequence[str]) -> frozenset[str]:
        return self._ids(self.sql.SQL_OUTBOX_REMOVE_FAILED, {}, ids)


__all__ = ["DEFAULT_CLAIM_LEASE_MS", "OUTBOX_FIELDS", "OutboxRow", "SqlOutboxStore"]
