"""The in-memory driver: the whole driver contract in process maps, for tests and ``jobs_dev``.

It passes the same conformance suite as Postgres: the live-key index, the claim fence, the
final-attempt burial and every operator action behave the same, error codes included. A claim
reads per-queue heaps (:mod:`.index`), never a sort of every row.
"""

from __future__ import annotations

import copy
import itertools
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Literal

from ...contracts.base import BaseDriver
from ...contracts.jobs import (
    LEASE_LAPSED_FINAL_ATTEMPT,
    LIVE_STATES,
    Ack,
    Claim,
    ClaimedJob,
    ClaimRef,
    Enqueued,
    EnqueueRequest,
    ExhaustedJob,
    Heartbeat,
    JobState,
    NackOptions,
    Progress,
    StepRecord,
    id_taken,
    lane_of,
    nack_counter,
    nack_state,
    same_tenant,
)
from ...contracts.operator import MAX_WORKER_IN_FLIGHT, QueueStats, WorkerInfo, finished_cutoffs
from ...contracts.series import queue_samples_of
from ...core.clock import Clock, system_clock
from ...core.logs import log_event
from ...defaults import DEFAULT_VISIBILITY_TIMEOUT_MS, PURGE_BATCH
from ...errors import JobDuplicateError, StepAtomicUnsupportedError
from ..lanes import LanePick, lanes_to_serve, share_of
from .counters import CounterBuckets
from .index import ClaimEntry, ClaimIndex, claim_order
from .operator import MemoryOperatorStore
from .rows import MemoryRow, copy_step
from .stores import MemoryBackfillStore, MemoryLeaderStore, MemoryLeaseStore, MemoryRateStore, MemorySchedulerStore

WakeListener = Callable[[str], None]
STATS_STATES = frozenset((*LIVE_STATES, "dead"))  # what stats() counts: depth and the dead-letter queue


class MemoryDriver(BaseDriver):
    """Every driver operation over in-process maps, thread-safe under one lock.

    >>> driver = MemoryDriver(clock=FrozenClock())
    >>> set_job_driver(driver)
    """

    name = "memory"
    supports_wake = True  # the wake is this process's enqueues only (supports_listen stays False)

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS,
        fair_queues: Iterable[str] = (),
    ) -> None:
        self.clock = clock or system_clock()
        self.visibility_timeout_ms = visibility_timeout_ms
        self.fair_queues: frozenset[str] = frozenset(fair_queues)
        self.lock = threading.RLock()
        self.rows: dict[str, MemoryRow] = {}
        self._seq = itertools.count(1)  # insertion order: the tie-break between rows due at one instant
        self.live: dict[tuple[str, str, str], str] = {}
        self._index = ClaimIndex(self.rows)
        self._listeners: list[WakeListener] = []
        self.registry: dict[str, WorkerInfo] = {}  # x_workers: the worker registry, by worker id
        self.counters = CounterBuckets()  # x_job_counters
        self._operator = MemoryOperatorStore(self)
        self._leases = MemoryLeaseStore(self.clock)
        self._rates = MemoryRateStore()
        self._leader = MemoryLeaderStore(self)
        self._scheduler_state = MemorySchedulerStore(self)
        self._backfills = MemoryBackfillStore(self)

    # -- capabilities --------------------------------------------------------------------------

    @property
    def operator(self) -> MemoryOperatorStore:
        return self._operator

    @property
    def leases(self) -> MemoryLeaseStore:
        return self._leases

    @property
    def rates(self) -> MemoryRateStore:
        return self._rates

    @property
    def leader(self) -> MemoryLeaderStore:
        return self._leader

    @property
    def scheduler_state(self) -> MemorySchedulerStore:
        return self._scheduler_state

    @property
    def backfills(self) -> MemoryBackfillStore:
        return self._backfills

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        """Hear every queue a due row lands on (the memory driver's whole wake); answers an unsubscribe."""
        with self.lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self.lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def wake_is_live(self) -> bool:
        """Always ``False``: no wake reaches this process from another (``supports_listen`` is ``False``)."""
        return False

    def announce(self, queue: str) -> None:
        """Tell every listener that ``queue`` has due work."""
        for listener in list(self._listeners):
            listener(queue)

    # -- the live index ------------------------------------------------------------------------

    def set_state(self, row: MemoryRow, state: JobState) -> None:
        """Move ``row`` to ``state``, keeping the live-key and claim indexes in step (callers hold the
        lock, and set a new run time, or a running row's lease, before the call). A row leaving
        ``running`` loses its claim and lease and keeps its worker: the worker of its last attempt."""
        was_live, is_live = row.state in LIVE_STATES, state in LIVE_STATES
        row.state = state
        row.updated_at_ms = self.clock.now_ms()
        if was_live and not is_live and self.live.get(row.live_key) == row.id:
            del self.live[row.live_key]
        elif is_live and not was_live:
            self.live[row.live_key] = row.id
        if state != "running":
            row.claim = row.lease_until_ms = None
            row.finished_at_ms = None if is_live else row.updated_at_ms
        self._index.file(row)

    def delete(self, row: MemoryRow) -> None:
        """Remove ``row`` and its steps (callers hold the lock)."""
        if self.live.get(row.live_key) == row.id:
            del self.live[row.live_key]
        del self.rows[row.id]
        self._index.drop(row)

    # -- enqueue -------------------------------------------------------------------------------

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        return self.enqueue_many([request])[0]

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """All or nothing, like the one statement it stands for: a refused request inserts no row of the batch."""
        with self.lock:
            answers, due = self.insert(requests, self.clock.now_ms())
        for queue in due:
            self.announce(queue)
        return answers

    def insert(self, requests: Sequence[EnqueueRequest], now: int) -> tuple[list[Enqueued], list[str]]:
        """``enqueue_many``'s rows at ``now`` (callers hold the lock and announce): all or nothing. Answers
        one answer per request and the queues that got a due row, in order."""
        answers: list[Enqueued] = []
        fresh: dict[str, MemoryRow] = {}  # this batch's rows by id, inserted only once none was refused
        fresh_keys: dict[tuple[str, str, str], MemoryRow] = {}
        for request in requests:
            existing = None if request.id is None else self.rows.get(request.id) or fresh.get(request.id)
            if existing is not None:  # an id that already names a row, live or finished, inserts nothing
                if not same_tenant(existing.tenant_id, request.tenant_id):
                    raise id_taken(request)  # another tenant's row: refused, never answered
                answers.append(Enqueued(existing.id, existing.run_id, True))
                continue
            key = (request.name, request.tenant_id or "", request.idempotency_key)
            holder = fresh_keys.get(key) or (self.rows[self.live[key]] if key in self.live else None)
            if holder is not None:
                if request.on_conflict == "error":
                    raise JobDuplicateError(
                        f"{request.name}: idempotency key {request.idempotency_key!r} is held by live job "
                        f"{holder.id}; enqueue with on_conflict='dedupe' to answer that job instead",
                        {"job": request.name, "key": request.idempotency_key, "holder": holder.id},
                    )
                answers.append(Enqueued(holder.id, holder.run_id, True))
                continue
            row = self._new_row(request, now)
            fresh[row.id] = fresh_keys[key] = row
            answers.append(Enqueued(row.id, row.run_id, False))
        for row in fresh.values():
            row.seq = next(self._seq)
            self.rows[row.id] = row
            self.live[row.live_key] = row.id
            self._index.file(row)
        return answers, sorted({row.queue for row in fresh.values() if row.run_at_ms <= now})

    def _new_row(self, request: EnqueueRequest, now: int) -> MemoryRow:
        run_at = request.run_at_ms if request.run_at_ms is not None else now
        return MemoryRow(
            id=request.id or str(uuid.uuid4()),
            run_id=request.run_id or str(uuid.uuid4()),
            name=request.name,
            queue=request.queue,
            tenant_id=request.tenant_id,
            idempotency_key=request.idempotency_key,
            input=copy.deepcopy(dict(request.input)),
            max_attempts=request.max_attempts,
            priority=request.priority,
            run_at_ms=run_at,
            created_at_ms=now,
            updated_at_ms=now,
            state="delayed" if run_at > now else "ready",
            enqueued_by=request.enqueued_by,
            traceparent=request.traceparent,
            concurrency_key=request.concurrency_key,
            lane=lane_of(request, self.fair_queues),
        )

    # -- claim ---------------------------------------------------------------------------------

    def _claim_checked(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        window_ms: int,
        drop_exhausted: frozenset[str],
        queue_limits: Mapping[str, int] | None,
        record: WorkerInfo | None,
    ) -> Claim:
        if record is not None:
            self.record_worker(record)
        claimed: list[ClaimedJob] = []
        with self.lock:
            now = self.clock.now_ms()
            lapsed: list[MemoryRow] = []
            offered: list[ClaimEntry] = []  # each queue's first rows in claim order (a fair queue's lanes first)
            popped: list[ClaimEntry] = []  # from the due heaps: what is not taken goes back there
            from_lanes: list[ClaimEntry] = []  # from a fair queue's lane heaps: back there
            fair: list[tuple[str, LanePick[ClaimEntry]]] = []
            for queue in sorted(set(queues) - self._operator.paused_queue_set):
                lapsed += self._index.fall_due(queue, now)
                cap = limit if queue_limits is None else min(limit, queue_limits.get(queue, limit))
                filled = self._index.pop(queue, now, cap)
                popped += filled
                if queue not in self.fair_queues:
                    offered += filled
                    continue
                pick = self._fair_pick(queue, now, cap)
                from_lanes += pick.first
                firsts = {entry[-1].id for entry in pick.first}
                offered += (pick.first + [entry for entry in filled if entry[-1].id not in firsts])[:cap]
                fair.append((queue, pick))
            exhausted = [self._bury(row, drop_exhausted) for row in sorted(lapsed, key=claim_order)]
            offered.sort()  # the first ``limit`` of every queue's first ``cap`` are what one sorted pass takes
            taken = {entry[-1].id for entry in offered[: max(limit, 0)]}
            self._index.restore(entry for entry in popped if entry[-1].id not in taken)
            self._index.restore_lanes(entry for entry in from_lanes if entry[-1].id not in taken)
            for queue, pick in fair:
                served, woken, retired = pick.moves(lambda entry: entry[-1].id in taken)
                self._index.turn(queue, now, served=served, woken=woken, retired=retired)
            for *_, row in offered[: max(limit, 0)]:
                row.attempts += 1
                row.worker_id, row.claim = worker_id, uuid.uuid4().hex
                row.lease_until_ms = now + window_ms
                self.set_state(row, "running")
                claimed.append(self._claimed(row))
        return Claim(jobs=claimed, buried=exhausted)

    def _fair_pick(self, queue: str, now: int, cap: int) -> LanePick[ClaimEntry]:
        """A fair queue's lanes for one claim (:mod:`..lanes`), each lane's due rows popped from its heap."""
        active, waking = self._index.turns(queue, now, cap)
        lanes = lanes_to_serve(active, waking, cap)
        share = share_of(cap, lanes)
        rows = {lane: self._index.pop_lane(queue, lane, now, share) for lane in lanes}
        return LanePick(lanes, [lane for _, lane in waking], rows)

    def _bury(self, row: MemoryRow, drop_exhausted: frozenset[str]) -> ExhaustedJob:
        state: Literal["failed", "dead"] = "failed" if row.name in drop_exhausted else "dead"
        self.set_state(row, state)
        row.last_error, row.last_code = LEASE_LAPSED_FINAL_ATTEMPT, None
        self.counters.count(row.name, state, 0, now=self.clock.now_ms(), timed=False)
        return ExhaustedJob(
            id=row.id,
            run_id=row.run_id,
            name=row.name,
            queue=row.queue,
            tenant_id=row.tenant_id,
            input=copy.deepcopy(row.input),
            attempt=row.attempts,
            state=state,
        )

    @staticmethod
    def _claimed(row: MemoryRow) -> ClaimedJob:
        assert row.worker_id is not None and row.claim is not None and row.lease_until_ms is not None
        return ClaimedJob(
            id=row.id,
            run_id=row.run_id,
            name=row.name,
            queue=row.queue,
            tenant_id=row.tenant_id,
            idempotency_key=row.idempotency_key,
            input=copy.deepcopy(row.input),
            attempt=row.attempts,
            max_attempts=row.max_attempts,
            priority=row.priority,
            run_at_ms=row.run_at_ms,
            created_at_ms=row.created_at_ms,
            worker_id=row.worker_id,
            claim=row.claim,
            lease_until_ms=row.lease_until_ms,
            steps=tuple(copy_step(s) for s in sorted(row.steps.values(), key=lambda s: s.seq)),
            concurrency_key=row.concurrency_key,
            enqueued_by=row.enqueued_by,
            traceparent=row.traceparent,
        )

    # -- settles -------------------------------------------------------------------------------

    def owned_row(self, job_id: str, ref: ClaimRef, op: str) -> MemoryRow | None:
        """The row ``ref`` still owns, or ``None`` after logging ``jobs.settle.unowned`` (callers hold the lock)."""
        row = self.rows.get(job_id)
        if row is not None and row.owned_by(ref):
            return row
        log_event(logging.WARNING, "jobs.settle.unowned", job_id=job_id, op=op, worker_id=ref.worker_id)
        return None

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None, wait_ms: int | None = None) -> bool:
        with self.lock:
            row = self.owned_row(job_id, ref, "ack")
            if row is None:
                return False
            self.set_state(row, "done")
            now = self.clock.now_ms()
            self.counters.count(row.name, "done", duration_ms or 0, now=now)
            if wait_ms is not None:
                self.counters.count_wait(row.queue, wait_ms, now=now)
            return True

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        with self.lock:
            return frozenset(
                a.job_id for a in acks if self.ack(a.job_id, a.ref, duration_ms=a.duration_ms, wait_ms=a.wait_ms)
            )

    def nack(self, job_id: str, ref: ClaimRef, options: NackOptions) -> bool:
        with self.lock:
            row = self.owned_row(job_id, ref, "nack")
            if row is None:
                return False
            target = nack_state(options)
            if not options.count_attempt:
                row.attempts = max(0, row.attempts - 1)
            if options.run_at_ms is not None:
                row.run_at_ms = options.run_at_ms
            elif target == "ready":
                row.run_at_ms = self.clock.now_ms()
            if options.error is not None:
                row.last_error, row.last_code = options.error, options.code
            self.set_state(row, target)
            counter = nack_counter(options)
            if counter is not None:
                self.counters.count(row.name, counter, options.duration_ms or 0, now=self.clock.now_ms())
                if options.wait_ms is not None:
                    self.counters.count_wait(row.queue, options.wait_ms, now=self.clock.now_ms())
            due = target == "ready" and row.run_at_ms <= self.clock.now_ms()
        if due:
            self.announce(row.queue)
        return True

    def heartbeat(self, beats: Sequence[Heartbeat], *, visibility_timeout_ms: int) -> frozenset[str]:
        renewed: set[str] = set()
        with self.lock:
            until = self.clock.now_ms() + visibility_timeout_ms
            for beat in beats:  # a miss is the caller's to judge (a renewal crossing its own settle is none)
                row = self.rows.get(beat.job_id)
                if row is not None and row.owned_by(beat.ref):
                    row.lease_until_ms = until
                    self._index.file(row)
                    renewed.add(row.id)
        return frozenset(renewed)

    def save_step(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        with self.lock:
            row = self.owned_row(job_id, ref, "save_step")
            if row is None:
                return False
            row.steps[step.name] = copy_step(step)
            return True

    def save_step_held(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        """No transaction of Django's reaches this driver's rows: ``X_STEP_ATOMIC_UNSUPPORTED``."""
        raise StepAtomicUnsupportedError.outside_django(self.name, step.name)

    def record_progress(self, job_id: str, ref: ClaimRef, progress: Progress) -> bool:
        with self.lock:
            row = self.owned_row(job_id, ref, "record_progress")
            if row is None:
                return False
            row.progress = progress
            return True

    # -- the worker registry and the counters --------------------------------------------------

    def record_worker(self, info: WorkerInfo) -> None:
        with self.lock:
            self.registry[info.id] = replace(info, in_flight=tuple(info.in_flight[:MAX_WORKER_IN_FLIGHT]))

    def remove_worker(self, worker_id: str) -> None:
        with self.lock:
            self.registry.pop(worker_id, None)

    def rollup_counters(self) -> int:
        with self.lock:
            return self.rollup_at(self.clock.now_ms())

    def rollup_at(self, now_ms: int) -> int:
        """The counter rollup at ``now_ms`` and the queues' depth sample it takes (the leader's renewal runs it)."""
        with self.lock:
            self.counters.sample(queue_samples_of(self.stats(), now_ms), now_ms)
            return self.counters.fold(now_ms)

    # -- retention and stats -------------------------------------------------------------------

    def stats(self) -> list[QueueStats]:
        with self.lock:
            now = self.clock.now_ms()
            paused = self._operator.paused_queue_set
            counts: dict[str, dict[str, int]] = {}
            oldest: dict[str, int] = {}
            for row in self.rows.values():
                if row.state not in STATS_STATES:
                    continue
                per = counts.setdefault(row.queue, {})
                per[row.state] = per.get(row.state, 0) + 1
                if row.state in ("ready", "delayed") and row.run_at_ms <= now:
                    oldest[row.queue] = min(oldest.get(row.queue, row.run_at_ms), row.run_at_ms)
            return [
                QueueStats(queue=queue, oldest_ready_ms=oldest.get(queue), paused=queue in paused, **per)
                for queue, per in sorted(counts.items())
            ]

    def purge_finished(self, *, before_ms: Mapping[JobState, int], limit: int = PURGE_BATCH) -> int:
        cutoffs = finished_cutoffs(before_ms, limit)
        with self.lock:
            expired = [
                row
                for row in self.rows.values()
                if row.state in cutoffs and row.finished_at_ms is not None and row.finished_at_ms < cutoffs[row.state]
            ]
            expired.sort(key=lambda row: (row.finished_at_ms or 0, row.id))
            for row in expired[:limit]:
                self.delete(row)
            return min(len(expired), limit)

    def close(self) -> None:
        with self.lock:
            self._listeners.clear()
