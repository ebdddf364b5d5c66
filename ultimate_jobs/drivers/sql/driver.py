"""The driver protocol over SQL, written once: what the Postgres and SQLite drivers share (the stores they
hold, the wake, the claim's frame, the settle of one step, progress, the worker registry, stats). A
backend's driver subclasses :class:`SqlDriver` with its dialect, its statements and the operations its
algorithm decides differently — one statement on Postgres, one ``BEGIN IMMEDIATE`` transaction of several
on SQLite."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ...contracts.base import BaseDriver
from ...contracts.jobs import (
    Ack,
    Claim,
    ClaimedJob,
    ClaimRef,
    Enqueued,
    EnqueueRequest,
    ExhaustedJob,
    JobState,
    NackOptions,
    Progress,
    StepRecord,
    id_taken,
    nack_state,
)
from ...contracts.operator import QueueStats, WorkerInfo, finished_cutoffs
from ...core.clock import Clock, system_clock
from ...core.logs import log_event
from ...defaults import DEFAULT_VISIBILITY_TIMEOUT_MS, PURGE_BATCH
from ...errors import JobDuplicateError
from ..wake_hub import WakeHub
from .dialect import Dialect, dumps
from .rows import worker_params

CLAIM_BURY_SCAN = 16
"""Rows a claim may lock beyond its caps, per queue, to bury lapsed final attempts on the way."""


ClaimAnswer = tuple[list[ClaimedJob], list[ExhaustedJob]]
"""What a backend's claim took (its claimed rows) and buried (the lapsed final attempts met on the way)."""


@dataclass(frozen=True)
class ClaimAsk:
    """One claim as a backend runs it: up to ``caps[i]`` rows of queue ``names[i]`` for ``worker_id``, leased
    for ``vt`` ms; ``drop`` names the jobs whose buried rows fail instead of dying; ``record`` is the worker's
    registry row to upsert with the claim."""

    names: list[str]
    caps: list[int]
    worker_id: str
    vt: int
    drop: frozenset[str]
    record: WorkerInfo | None


class SqlDriver(BaseDriver):
    """The shared half of an SQL driver. A subclass names its ``dialect``, its hot-path catalogue ``sql``,
    the classes of its stores, and implements ``_claim``, ``_fence``, ``enqueue_many``, ``ack_many``,
    ``nack``, ``heartbeat``, ``purge_finished`` and ``rollup_counters``."""

    dialect: Dialect
    sql: ModuleType
    parts: tuple[Callable[[Any], Any], ...]
    """The classes of ``driver.operator``, ``driver.leases``, the scheduler's store (``driver.leader`` and
    ``driver.scheduler_state``), ``driver.backfills`` and ``driver.rates``, each built over the driver."""

    def __init__(
        self,
        *,
        alias: str = "default",
        clock: Clock | None = None,
        visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS,
        executor: Any = None,
        fair_queues: Iterable[str] = (),
    ) -> None:
        self.executor = executor or self._executor(alias)
        self.alias: str = self.executor.alias
        self.clock = clock or system_clock()
        self.visibility_timeout_ms = visibility_timeout_ms
        self.fair_queues: frozenset[str] = frozenset(fair_queues)
        self._wakes: WakeHub[Any] = WakeHub(self._start_wake)
        self._operator, self._leases, self._scheduler, self._backfills, self._rates = (
            build(self) for build in self.parts
        )

    @abstractmethod
    def _executor(self, alias: str) -> Any:
        """The backend's executor over ``alias`` (when the caller passed none)."""

    @property
    def operator(self) -> Any:
        return self._operator

    @property
    def leases(self) -> Any:
        return self._leases

    @property
    def rates(self) -> Any:
        return self._rates

    @property
    def leader(self) -> Any:
        return self._scheduler

    @property
    def scheduler_state(self) -> Any:
        return self._scheduler

    @property
    def backfills(self) -> Any:
        return self._backfills

    def _now(self) -> int:
        return self.clock.now_ms()

    # -- the wake ------------------------------------------------------------------------------

    @abstractmethod
    def _start_wake(self, tell: Callable[[str], None]) -> Any:
        """Start the backend's wake, calling ``tell(queue)`` for each queue that becomes due."""

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Hear the queue names that become due (see the backend's wake). The wake starts with the first
        subscriber — only the worker role subscribes, so an enqueuing web process holds none — and stops
        with the last. Answers an unsubscribe."""
        return self._wakes.subscribe(listener)

    def wake_is_live(self) -> bool:
        """Whether the cross-process wake is proven (the worker then raises its idle ceiling to 5 s)."""
        return self._wakes.is_live()

    def announce(self, queues: Sequence[str]) -> None:
        """Tell this process's subscribers ``queues`` became due, where the backend's statements do not
        announce themselves (a Postgres statement notifies inside itself: nothing to do here)."""
        return None

    def close(self) -> None:
        """Stop the wake; statements run on Django's connections, which Django closes."""
        self._wakes.close()

    # -- enqueue -------------------------------------------------------------------------------

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        return self.enqueue_many([request])[0]

    @abstractmethod
    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Write ``requests``, answering one :class:`Enqueued` per request, in order."""

    def _held(self, request: EnqueueRequest, own_id: str, holder: Sequence[Any] | None) -> Enqueued:
        """The answer to a request that inserted nothing: ``holder`` (the id and run id columns of the row
        holding its id or live key, and whether that row holds the id under another tenant; ``None`` or
        NULLs when none does) deduped, ``X_JOB_DUPLICATE`` when the caller asked for an error, when the
        holder is gone already, or when the id names another tenant's row (:func:`id_taken`)."""
        if holder is not None and holder[2]:
            raise id_taken(request)
        if holder is None or holder[0] is None:
            raise JobDuplicateError(
                f"{request.name}: key {request.idempotency_key!r} conflicted with a row that is gone; enqueue again",
                {"job": request.name, "key": request.idempotency_key},
            )
        job_id, run_id = self.dialect.uid(holder[0]), self.dialect.uid(holder[1])
        if request.on_conflict == "error" and job_id != own_id:
            raise JobDuplicateError(
                f"{request.name}: idempotency key {request.idempotency_key!r} is held by live job {job_id}; "
                "enqueue with on_conflict='dedupe' to answer that job instead",
                {"job": request.name, "key": request.idempotency_key, "holder": job_id},
            )
        return Enqueued(job_id, run_id, True)

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
        if limit <= 0:
            return Claim()
        names = list(dict.fromkeys(queues))
        caps = [min(limit, (queue_limits or {}).get(q, limit)) for q in names]
        ask = ClaimAsk(names, caps, worker_id, window_ms, drop_exhausted, record)
        claimed, exhausted = self._claim(ask)
        claimed.sort(key=lambda job: (-job.priority, job.run_at_ms, job.id))
        if len(claimed) > limit:  # per-queue caps summed past the overall limit: hand the rest back now
            for extra in claimed[limit:]:
                self.nack(extra.id, extra.ref, NackOptions(count_attempt=False, run_at_ms=extra.run_at_ms))
            claimed = claimed[:limit]
        return Claim(jobs=claimed, buried=exhausted)

    @abstractmethod
    def _claim(self, ask: ClaimAsk) -> ClaimAnswer:
        """Claim up to ``ask.caps[i]`` due rows of each queue ``ask.names[i]`` and bury the lapsed final attempts met
        on the way: answers what it claimed and what it buried."""

    # -- settles -------------------------------------------------------------------------------

    @abstractmethod
    def _fence(self, job_id: str, claim: str) -> tuple[str, str] | None:
        """The id and claim parameters of a settle, or ``None`` when they can name no row."""

    def _unowned(self, job_id: str, ref: ClaimRef, op: str) -> None:
        log_event(logging.WARNING, "jobs.settle.unowned", job_id=job_id, op=op, worker_id=ref.worker_id)

    @abstractmethod
    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        """Settle ``acks`` done in one round trip, each fenced on its own claim; answers the ids that landed."""

    def nack(self, job_id: str, ref: ClaimRef, options: NackOptions) -> bool:
        fenced = self._fence(job_id, ref.claim)
        landed = fenced is not None and self._nack(fenced, ref.worker_id, options)
        if not landed:
            self._unowned(job_id, ref, "nack")
        return landed

    @abstractmethod
    def _nack(self, fenced: tuple[str, str], worker_id: str, options: NackOptions) -> bool:
        """Settle the row ``fenced`` (its id and claim parameters) by ``options``; answers whether it landed."""

    def _nack_params(self, fenced: tuple[str, str], worker_id: str, options: NackOptions, now: int) -> dict[str, Any]:
        """The parameters every backend's ``SQL_NACK`` takes."""
        return {
            "id": fenced[0],
            "worker": worker_id,
            "claim": fenced[1],
            "state": nack_state(options),
            "uncount": 0 if options.count_attempt else 1,
            "run_at": self.dialect.at_or_none(options.run_at_ms),
            "error": options.error,
            "code": options.code,
            "now": self.dialect.at(now),
        }

    def save_step(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        return self._save_step(self.sql.SQL_SAVE_STEP, job_id, ref, step, "save_step")

    def save_step_held(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        return self._save_step(self.sql.SQL_SAVE_STEP_HELD, job_id, ref, step, "save_step_held")

    def _save_step(self, statement: str, job_id: str, ref: ClaimRef, step: StepRecord, what: str) -> bool:
        fenced = self._fence(job_id, ref.claim)
        landed: Sequence[Any] = ()
        if fenced is not None:
            d = self.dialect
            params = {
                "id": fenced[0],
                "worker": ref.worker_id,
                "claim": fenced[1],
                "name": step.name,
                "seq": step.seq,
                "status": step.status,
                "output": dumps(step.output),
                "started": d.at(step.started_at_ms),
                "finished": d.at_or_none(step.finished_at_ms),
                "wake": d.at_or_none(step.wake_at_ms),
                "meta": dumps(dict(step.meta)),
            }
            landed = self.executor.query(statement, params, binding="prepared")
        if not landed:
            self._unowned(job_id, ref, what)
        return bool(landed)

    def record_progress(self, job_id: str, ref: ClaimRef, progress: Progress) -> bool:
        fenced = self._fence(job_id, ref.claim)
        landed: Sequence[Any] = ()
        if fenced is not None:
            value = {"done": progress.done, "total": progress.total, "note": progress.note, "at_ms": progress.at_ms}
            params = {"id": fenced[0], "worker": ref.worker_id, "claim": fenced[1], "progress": dumps(value)}
            landed = self.executor.query(self.sql.SQL_RECORD_PROGRESS, params)
        if not landed:
            self._unowned(job_id, ref, "record_progress")
        return bool(landed)

    # -- the worker registry and the counters --------------------------------------------------

    def record_worker(self, info: WorkerInfo) -> None:
        self.executor.query(self.sql.SQL_RECORD_WORKER, worker_params(info, self.dialect))

    def remove_worker(self, worker_id: str) -> None:
        self.executor.query(self.sql.SQL_REMOVE_WORKER, {"id": worker_id})

    @abstractmethod
    def rollup_counters(self) -> int:
        """Fold the counter buckets past their tier's retention at the driver's now; answers how many went."""

    # -- retention and stats -------------------------------------------------------------------

    def purge_finished(self, *, before_ms: Mapping[JobState, int], limit: int = PURGE_BATCH) -> int:
        cutoffs = finished_cutoffs(before_ms, limit)
        return self._purge(cutoffs, limit) if cutoffs else 0

    @abstractmethod
    def _purge(self, cutoffs: dict[JobState, int], limit: int) -> int:
        """Delete at most ``limit`` finished rows older than their state's cutoff; answers how many went."""

    def stats(self) -> list[QueueStats]:
        per: dict[str, dict[str, Any]] = {}
        rows = self.executor.query(self.sql.SQL_STATS, {"now": self.dialect.at(self._now())})
        for queue, state, count, oldest, paused in rows:
            entry = per.setdefault(queue, {"queue": queue, "paused": bool(paused), "oldest_ready_ms": None})
            entry[state] = count
            if oldest is not None:
                oldest_ms = self.dialect.instant(oldest)
                current = entry["oldest_ready_ms"]
                entry["oldest_ready_ms"] = oldest_ms if current is None else min(current, oldest_ms)
        return [QueueStats(**entry) for _, entry in sorted(per.items())]
