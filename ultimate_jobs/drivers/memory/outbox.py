"""The in-memory outbox store, for tests and ``jobs_dev``: the Postgres store's semantics in one map.

A published row is dropped — :meth:`MemoryOutboxStore.retained` is the relay's backlog, not a running
total (the Postgres store keeps ``published_at`` as the audit trail). Staging is not transactional:
a test says whether the caller "is in a transaction" through ``current_tx``.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
)
from ...core.clock import Clock
from ...core.installed import job_clock
from ...errors import InvariantError


@dataclass(slots=True)
class _Row:
    id: str
    run_id: str
    request: EnqueueRequest
    staged_at_ms: int
    seq: int
    claimed_by: str | None = None
    claimed_at_ms: int | None = None
    last_error: str | None = None
    failed_at_ms: int | None = None

    def record(self) -> OutboxRecord:
        return OutboxRecord(
            id=self.id,
            run_id=self.run_id,
            request=copy.deepcopy(self.request),
            staged_at_ms=self.staged_at_ms,
            claimed_by=self.claimed_by,
            claimed_at_ms=self.claimed_at_ms,
        )


class MemoryOutboxStore:
    """Every outbox operation over a process map, thread-safe under one lock.

    >>> store = memory_outbox_store(clock=FrozenClock(), current_tx=lambda: in_tx)
    """

    name = "memory"
    supports_wake = True
    supports_listen = False  # a stage in this process is the whole wake

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS,
        current_tx: Callable[[], bool] | None = None,
    ) -> None:
        self.claim_lease_ms = check_claim_lease(claim_lease_ms)
        self._clock = clock
        self._current_tx = current_tx or (lambda: False)
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._seq = 0
        self._listeners: list[WakeListener] = []

    @property
    def clock(self) -> Clock:
        return self._clock or job_clock()

    def in_transaction(self) -> bool:
        return bool(self._current_tx())

    def stage(self, requests: Sequence[EnqueueRequest]) -> list[OutboxRecord]:
        check_staged(requests)
        with self._lock:
            ids = [r.id for r in requests]
            taken = [i for i in ids if i in self._rows]
            if taken or len(set(ids)) != len(ids):
                raise InvariantError(
                    f"outbox row {taken[0] if taken else 'id'} is already staged; every staged enqueue needs "
                    "its own id",
                    {"ids": taken},
                )
            now = self.clock.now_ms()
            staged: list[OutboxRecord] = []
            for request in requests:
                assert request.id is not None and request.run_id is not None  # check_staged
                self._seq += 1
                row = _Row(request.id, request.run_id, copy.deepcopy(request), now, self._seq)
                self._rows[row.id] = row
                staged.append(row.record())
        for listener in list(self._listeners):
            listener("")
        return staged

    def claim(self, *, claimant: str, limit: int) -> list[OutboxRecord]:
        check_limit(limit)
        token = f"{claimant}:{uuid.uuid4().hex[:12]}"
        with self._lock:
            now = self.clock.now_ms()
            lapsed = now - self.claim_lease_ms
            free = [
                r
                for r in self._rows.values()
                if r.failed_at_ms is None and (r.claimed_at_ms is None or r.claimed_at_ms <= lapsed)
            ]
            free.sort(key=lambda r: (r.staged_at_ms, r.id, r.seq))
            taken = free[:limit]
            for row in taken:
                row.claimed_by, row.claimed_at_ms = token, now
            return [row.record() for row in taken]

    def release(self, ids: Sequence[str], *, claimed_by: str, error: str | None = None) -> frozenset[str]:
        landed: set[str] = set()
        with self._lock:
            for row_id in ids:
                row = self._rows.get(row_id)
                if row is not None and row.claimed_by == claimed_by:
                    row.claimed_by = row.claimed_at_ms = None
                    row.last_error = error if error is not None else row.last_error
                    landed.add(row_id)
        return frozenset(landed)

    def mark_published(self, ids: Sequence[str], *, claimed_by: str) -> frozenset[str]:
        landed: set[str] = set()
        with self._lock:
            for row_id in ids:
                row = self._rows.get(row_id)
                if row is not None and row.claimed_by == claimed_by:
                    del self._rows[row_id]  # the memory store keeps no audit trail
                    landed.add(row_id)
        return frozenset(landed)

    def set_aside(self, ids: Sequence[str], *, claimed_by: str, error: str) -> frozenset[str]:
        landed: set[str] = set()
        with self._lock:
            now = self.clock.now_ms()
            for row_id in ids:
                row = self._rows.get(row_id)
                if row is not None and row.claimed_by == claimed_by:
                    row.claimed_by = row.claimed_at_ms = None
                    row.failed_at_ms, row.last_error = now, error
                    landed.add(row_id)
        return frozenset(landed)

    def backlog(self) -> int:
        return self.stats().pending

    def stats(self) -> OutboxStats:
        with self._lock:
            pending = [r.staged_at_ms for r in self._rows.values() if r.failed_at_ms is None]
            failed = len(self._rows) - len(pending)
        return OutboxStats(len(pending), failed, min(pending) if pending else None)

    def failed(self, *, limit: int) -> list[FailedOutboxRow]:
        check_limit(limit)
        with self._lock:
            rows = sorted(
                (r for r in self._rows.values() if r.failed_at_ms is not None),
                key=lambda r: (r.staged_at_ms, r.id, r.seq),
            )[:limit]
            return [
                FailedOutboxRow(
                    r.id, r.request.name, r.request.queue, r.staged_at_ms, r.failed_at_ms or 0, r.last_error
                )
                for r in rows
            ]

    def retry_failed(self, ids: Sequence[str]) -> frozenset[str]:
        with self._lock:
            landed = {i for i in ids if i in self._rows and self._rows[i].failed_at_ms is not None}
            for row_id in landed:
                self._rows[row_id].failed_at_ms = None
        if landed:
            for listener in list(self._listeners):
                listener("")
        return frozenset(landed)

    def remove_failed(self, ids: Sequence[str]) -> frozenset[str]:
        with self._lock:
            landed = {i for i in ids if i in self._rows and self._rows[i].failed_at_ms is not None}
            for row_id in landed:
                del self._rows[row_id]
        return frozenset(landed)

    def purge_published(self, *, before_ms: int, limit: int) -> int:
        check_limit(limit)
        return 0  # a published row is deleted at once: the memory store keeps no audit trail

    def retained(self) -> list[OutboxRecord]:
        """Every row not yet published, in claim order: the relay's backlog."""
        with self._lock:
            rows = sorted(self._rows.values(), key=lambda r: (r.staged_at_ms, r.id, r.seq))
            return [row.record() for row in rows]

    def last_error(self, row_id: str) -> str | None:
        """The error the last failed publish of a retained row released it with."""
        with self._lock:
            row = self._rows.get(row_id)
            return row.last_error if row is not None else None

    # -- the wake: in one process, a stage is the whole wake ------------------------------------

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        """Hear every stage (the memory store's whole wake); answers an unsubscribe."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def wake_is_live(self) -> bool:
        """Always ``False``: no wake reaches this process from another (``supports_listen`` is ``False``)."""
        return False


def memory_outbox_store(
    *,
    clock: Clock | None = None,
    claim_lease_ms: int = DEFAULT_CLAIM_LEASE_MS,
    current_tx: Callable[[], bool] | None = None,
) -> MemoryOutboxStore:
    """An in-memory outbox store. ``current_tx()`` answers whether the caller is "in a transaction"
    (default: never, so an installed router publishes directly unless a test says otherwise).

    >>> store = memory_outbox_store(clock=clock, current_tx=lambda: True)
    >>> set_jobs_router(OutboxRouter(store=store, driver=driver))
    """
    return MemoryOutboxStore(clock=clock, claim_lease_ms=claim_lease_ms, current_tx=current_tx)
