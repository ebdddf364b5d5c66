"""The SQLite driver — the embedded default: the whole driver protocol on Django's SQLite connection for
the configured alias, over the same tables and migrations as the Postgres driver. Every statement is an
``SQL_*`` constant (:mod:`.sql`, :mod:`.sql_operator`, :mod:`.sql_stores`).

SQLite has one writer at a time and no LISTEN/NOTIFY, so:

- an operation of several statements (a claim, a settle and its counter) runs in one ``BEGIN IMMEDIATE``
  transaction — as atomic as the Postgres driver's single statement, and two claims never see one row;
- an enqueue in the worker's own process wakes it at once (:meth:`SqliteDriver.subscribe`); a worker in
  another process hears it through a watch on ``PRAGMA data_version`` (:mod:`.watch`) within about
  100 ms, and its poll — 250 ms, backing off to 5 s while idle — stays the guarantee behind it.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from ...clock import Clock, system_clock
from ...errors import ClaimQueuesEmptyError, DriverUnavailableError, InvariantError, JobDuplicateError
from ...ids import new_id
from ...logs import log_event
from ..base import (
    DEFAULT_VISIBILITY_TIMEOUT_MS,
    PURGE_BATCH,
    Ack,
    Claim,
    ClaimRef,
    Enqueued,
    EnqueueRequest,
    ExhaustedJob,
    Heartbeat,
    JobState,
    NackOptions,
    QueueStats,
    StepRecord,
    WorkerInfo,
    nack_counter,
    nack_state,
)
from ..purging import finished_cutoffs
from ..wake_hub import WakeHub
from . import sql
from .executor import SqliteExecutor
from .rows import claimed_job, dashed, dumps, hex_id, job_record, ms, step_record, ts, ts_or_none, worker_params
from .watch import WATCH_INTERVAL_MS, DataVersionWatch

if TYPE_CHECKING:
    from .stores import SqliteBackfillStore, SqliteLeaderStore, SqliteLeaseStore, SqliteSchedulerStore

MIN_SQLITE = (3, 35, 0)
"""RETURNING (3.35) is what every settle answers through; UPDATE … FROM (3.33) and json_each come before."""

CLAIM_BURY_SCAN = 16
"""Rows a claim may read beyond its caps, per queue, to bury lapsed final attempts on the way."""

WAKE_DUE_WITHIN_MS = 1_000
"""An enqueue announces its queue to this process's worker when the row is due within this long."""

COUNTER_WIDTH_MS = 60_000


def bucket_of(now_ms: int) -> str:
    """The 1-minute counter bucket holding ``now_ms``, as column text."""
    return ts(now_ms - now_ms % COUNTER_WIDTH_MS)


class SqliteDriver:
    """The whole driver protocol over SQLite. ``alias`` names the Django database (an SQLite one);
    ``watch_interval_ms`` is how often a subscribed worker's watch reads ``PRAGMA data_version`` (``None``:
    no cross-process wake, only the poll).

    >>> set_job_driver(SqliteDriver(alias="default"))
    """

    name = "sqlite"
    supports_listen = False

    def __init__(
        self,
        *,
        alias: str = "default",
        clock: Clock | None = None,
        visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS,
        watch_interval_ms: int | None = WATCH_INTERVAL_MS,
    ) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise DriverUnavailableError(
                f"the sqlite driver needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer (RETURNING); this "
                f"Python links SQLite {sqlite3.sqlite_version}. Upgrade Python's SQLite, or use the postgres driver",
                {"sqlite": sqlite3.sqlite_version},
            )
        self.executor = SqliteExecutor(alias)
        self.alias = alias
        self.clock = clock or system_clock()
        self.visibility_timeout_ms = visibility_timeout_ms
        self.watch_interval_ms = watch_interval_ms
        from .introspect import SqliteIntrospection
        from .stores import SqliteBackfillStore, SqliteLeaderStore, SqliteLeaseStore, SqliteSchedulerStore

        self._introspect = SqliteIntrospection(self)
        self._leases = SqliteLeaseStore(self)
        self._leader = SqliteLeaderStore(self)
        self._scheduler_state = SqliteSchedulerStore(self)
        self._backfills = SqliteBackfillStore(self)
        self._wakes: WakeHub[DataVersionWatch] = WakeHub(self._start_watch)

    @property
    def introspect(self) -> Any:
        return self._introspect

    @property
    def leases(self) -> SqliteLeaseStore:
        return self._leases

    @property
    def leader(self) -> SqliteLeaderStore:
        return self._leader

    @property
    def scheduler_state(self) -> SqliteSchedulerStore:
        return self._scheduler_state

    @property
    def backfills(self) -> SqliteBackfillStore:
        return self._backfills

    def _now(self) -> int:
        return self.clock.now_ms()

    # -- the wake ------------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Hear the queues that become due: this process's enqueues, due retries, requeues, promotes and
        resumes at once (after their commit), and another process's commits through the watch on the file
        (:class:`~.watch.DataVersionWatch`, started with the first subscriber — only the worker role
        subscribes — and stopped with the last). Answers an unsubscribe."""
        return self._wakes.subscribe(listener)

    def _start_watch(self, tell: Callable[[str], None]) -> DataVersionWatch | None:
        conn: Any = connections[self.alias]
        if self.watch_interval_ms is None or conn.is_in_memory_db():
            return None
        return DataVersionWatch(
            str(conn.settings_dict["NAME"]),
            now=lambda: ts(self._now()),
            on_due=tell,
            interval_ms=self.watch_interval_ms,
        )

    def tell(self, queues: Sequence[str]) -> None:
        """Tell every subscriber each of ``queues`` now."""
        for queue in queues:
            self._wakes.tell(queue)

    def announce(self, queues: Sequence[str]) -> None:
        """Tell this process's subscribers each queue once. Inside the caller's transaction the rows are
        not visible to the worker's own connection until commit, so the announcement waits for it."""
        if not self._wakes.listening or not queues:
            return
        names = list(dict.fromkeys(queues))
        if self.executor.in_transaction():
            transaction.on_commit(lambda: self.tell(names), using=self.alias)
        else:
            self.tell(names)

    def wake_is_live(self) -> bool:
        """Whether the cross-process watch is reading the file (the worker then raises its idle ceiling to
        5 s, as it does over a proven LISTEN session)."""
        return self._wakes.is_live()

    # -- enqueue -------------------------------------------------------------------------------

    def _row(self, request: EnqueueRequest, now: int) -> dict[str, Any]:
        job_id = hex_id(request.id) if request.id is not None else uuid.UUID(new_id()).hex
        run_id = hex_id(request.run_id) if request.run_id is not None else uuid.UUID(new_id()).hex
        if job_id is None or run_id is None:
            raise InvariantError(
                f"{request.name}: the request's id {request.id!r} and run id {request.run_id!r} must be UUIDs "
                "(leave them None and the driver mints them)",
                {"job": request.name},
            )
        run_at = now if request.run_at_ms is None else request.run_at_ms
        return {
            "id": job_id,
            "run_id": run_id,
            "name": request.name,
            "queue": request.queue,
            "tenant_id": request.tenant_id,
            "idempotency_key": request.idempotency_key,
            "input": dumps(dict(request.input)),
            "state": "delayed" if run_at > now else "ready",
            "max_attempts": request.max_attempts,
            "priority": request.priority,
            "run_at": ts(run_at),
            "enqueued_by": request.enqueued_by,
            "traceparent": request.traceparent,
            "concurrency_key": request.concurrency_key,
            "_due": run_at <= now + WAKE_DUE_WITHIN_MS,
        }

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        return self.enqueue_many([request])[0]

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        if not requests:
            return []
        now = self._now()
        rows = [self._row(r, now) for r in requests]
        answers = self.insert_rows(rows, requests, now)
        self.announce([row["queue"] for row, a in zip(rows, answers, strict=True) if row["_due"] and not a.deduped])
        return answers

    def insert_rows(self, rows: list[dict[str, Any]], requests: Sequence[EnqueueRequest], now: int) -> list[Enqueued]:
        """Insert request rows built by ``_row`` (one statement; a transaction when a refusal must undo the
        batch) and answer each request. The scheduler's fire calls it inside its own transaction."""
        guard = (
            self.executor.write()
            if len(rows) > 1 and any(r.on_conflict == "error" for r in requests)
            else nullcontext()
        )
        with guard:
            if len(rows) == 1:
                params = {k: v for k, v in rows[0].items() if k != "_due"}
                params["now"] = ts(now)
                inserted = {r[0] for r in self.executor.query(sql.SQL_ENQUEUE_ONE, params)}
            else:
                payload = dumps([{k: v for k, v in row.items() if k != "_due"} for row in rows])
                inserted = {r[0] for r in self.executor.query(sql.SQL_ENQUEUE, {"rows": payload, "now": ts(now)})}
            answers: list[Enqueued] = []
            for row, request in zip(rows, requests, strict=True):
                if row["id"] in inserted:
                    answers.append(Enqueued(dashed(row["id"]), dashed(row["run_id"]), False))
                    continue
                answers.append(self._held(request, row))
        return answers

    def _held(self, request: EnqueueRequest, row: dict[str, Any]) -> Enqueued:
        """The answer to a request that inserted nothing: the row holding its id or live key (deduped),
        ``X_JOB_DUPLICATE`` when the caller asked for an error, or when the holder is gone already."""
        params = {k: row[k] for k in ("id", "name", "tenant_id", "idempotency_key")}
        found = self.executor.query(sql.SQL_ENQUEUE_HOLDER, params)
        if not found:
            raise JobDuplicateError(
                f"{request.name}: key {request.idempotency_key!r} conflicted with a row that is gone; enqueue again",
                {"job": request.name, "key": request.idempotency_key},
            )
        job_id, run_id = found[0]
        if request.on_conflict == "error" and job_id != row["id"]:
            raise JobDuplicateError(
                f"{request.name}: idempotency key {request.idempotency_key!r} is held by live job {dashed(job_id)}; "
                "enqueue with on_conflict='dedupe' to answer that job instead",
                {"job": request.name, "key": request.idempotency_key, "holder": dashed(job_id)},
            )
        return Enqueued(dashed(job_id), dashed(run_id), True)

    # -- claim ---------------------------------------------------------------------------------

    def claim(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS,
        drop_exhausted: frozenset[str] = frozenset(),
        queue_limits: Mapping[str, int] | None = None,
        record: WorkerInfo | None = None,
    ) -> Claim:
        if not queues:
            raise ClaimQueuesEmptyError("claim() named no queue; pass at least one queue name", {})
        if limit <= 0:
            return Claim()
        names = list(dict.fromkeys(queues))
        now = self._now()
        now_ts = ts(now)
        q = self.executor.query
        with self.executor.write():
            if record is not None:
                q(sql.SQL_RECORD_WORKER, worker_params(record))
            paused = {r[0] for r in q(sql.SQL_PAUSED_AMONG, {"queues": dumps(names)})}
            take: list[str] = []
            bury: list[str] = []
            for queue in names:
                if queue in paused:
                    continue
                cap = min(limit, (queue_limits or {}).get(queue, limit))
                if cap <= 0:
                    continue
                due = q(sql.SQL_CLAIM_DUE, {"queue": queue, "now": now_ts, "cap": cap})
                lapsed = q(sql.SQL_CLAIM_LAPSED, {"queue": queue, "now": now_ts, "cap": cap + CLAIM_BURY_SCAN})
                candidates = list(due)
                for row in lapsed:
                    if row[3] >= row[4]:
                        bury.append(row[0])
                    else:
                        candidates.append(row)
                candidates.sort(key=lambda r: (-r[5], ms(r[6]), r[0]))
                take.extend(r[0] for r in candidates[:cap])
            buried = (
                q(sql.SQL_BURY, {"ids": dumps(bury), "drop": dumps(sorted(drop_exhausted)), "now": now_ts})
                if bury
                else []
            )
            self._count_buried(buried, now)
            claimed_rows = (
                q(
                    sql.SQL_CLAIM_TAKE,
                    {"ids": dumps(take), "worker": worker_id, "lease": ts(now + visibility_timeout_ms), "now": now_ts},
                )
                if take
                else []
            )
            steps: dict[str, list[StepRecord]] = {}
            if claimed_rows:
                for row in q(sql.SQL_STEPS_OF, {"ids": dumps([r[0] for r in claimed_rows])}):
                    steps.setdefault(row[0], []).append(step_record(row[1:]))
        claimed = [claimed_job(row, tuple(steps.get(row[0], ()))) for row in claimed_rows]
        claimed.sort(key=lambda job: (-job.priority, job.run_at_ms, job.id))
        if len(claimed) > limit:  # per-queue caps summed past the overall limit: hand the rest back now
            for extra in claimed[limit:]:
                self.nack(extra.id, extra.ref, NackOptions(count_attempt=False, run_at_ms=extra.run_at_ms))
            claimed = claimed[:limit]
        exhausted = []
        if buried:
            for row in buried:
                record_ = job_record(row)
                exhausted.append(
                    ExhaustedJob(
                        id=record_.id,
                        run_id=record_.run_id,
                        name=record_.name,
                        queue=record_.queue,
                        tenant_id=record_.tenant_id,
                        input=record_.input,
                        attempt=record_.attempts,
                        state="failed" if record_.state == "failed" else "dead",
                    )
                )
        return Claim(jobs=claimed, buried=exhausted)

    def _count_buried(self, buried: list[tuple[Any, ...]], now: int) -> None:
        per: dict[str, list[int]] = {}
        for row in buried:
            counts = per.setdefault(row[2], [0, 0])
            counts[0 if row[4] == "failed" else 1] += 1
        for name, (failed, dead) in per.items():
            self._count(name, now, failed=failed, dead=dead)

    def _count(
        self, job: str, now: int, *, done: int = 0, retried: int = 0, failed: int = 0, dead: int = 0, duration: int = 0
    ) -> None:
        self.executor.query(
            sql.SQL_COUNT,
            {
                "job": job,
                "bucket": bucket_of(now),
                "done": done,
                "retried": retried,
                "failed": failed,
                "dead": dead,
                "duration": duration,
            },
        )

    # -- settles -------------------------------------------------------------------------------

    def _unowned(self, job_id: str, ref: ClaimRef, op: str) -> None:
        log_event(logging.WARNING, "jobs.settle.unowned", job_id=job_id, op=op, worker_id=ref.worker_id)

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None) -> bool:
        return job_id in self.ack_many([Ack(job_id, ref, duration_ms or 0)])

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        fenced = [(a, hex_id(a.job_id), hex_id(a.ref.claim)) for a in acks]
        valid = [(a, job, claim) for a, job, claim in fenced if job is not None and claim is not None]
        landed: set[str] = set()
        if valid:
            now = self._now()
            payload = dumps([{"id": job, "worker": a.ref.worker_id, "claim": claim} for a, job, claim in valid])
            durations: dict[str, int] = {}
            for a, job, _ in valid:
                durations[job] = a.duration_ms
            with self.executor.write():
                rows = self.executor.query(sql.SQL_ACK, {"acks": payload, "now": ts(now)})
                per: dict[str, list[int]] = {}
                for job, name in rows:
                    counts = per.setdefault(name, [0, 0])
                    counts[0] += 1
                    counts[1] += durations.get(job, 0)
                for name, (done, duration) in per.items():
                    self._count(name, now, done=done, duration=duration)
            landed = {dashed(job) for job, _ in rows}
        answered = frozenset(a.job_id for a in acks if _canonical(a.job_id) in landed)
        for a in acks:
            if a.job_id not in answered:
                self._unowned(a.job_id, a.ref, "ack")
        return answered

    def nack(self, job_id: str, ref: ClaimRef, options: NackOptions) -> bool:
        job, claim = hex_id(job_id), hex_id(ref.claim)
        if job is None or claim is None:
            self._unowned(job_id, ref, "nack")
            return False
        now = self._now()
        counter = nack_counter(options)
        with self.executor.write():
            rows = self.executor.query(
                sql.SQL_NACK,
                {
                    "id": job,
                    "worker": ref.worker_id,
                    "claim": claim,
                    "state": nack_state(options),
                    "uncount": 0 if options.count_attempt else 1,
                    "run_at": ts_or_none(options.run_at_ms),
                    "error": options.error,
                    "code": options.code,
                    "now": ts(now),
                },
            )
            if rows and counter is not None:
                self._count(
                    rows[0][0],
                    now,
                    retried=int(counter == "retried"),
                    failed=int(counter == "failed"),
                    dead=int(counter == "dead"),
                    duration=options.duration_ms or 0,
                )
        if not rows:
            self._unowned(job_id, ref, "nack")
            return False
        _, queue, state, run_at = rows[0]
        if state == "ready" and ms(run_at) <= now:
            self.announce([queue])
        return True

    def heartbeat(self, beats: Sequence[Heartbeat], *, visibility_timeout_ms: int) -> frozenset[str]:
        fenced = [(b, hex_id(b.job_id), hex_id(b.ref.claim)) for b in beats]
        payload = [{"id": job, "worker": b.ref.worker_id, "claim": claim} for b, job, claim in fenced if job and claim]
        if not payload:
            return frozenset()
        now = self._now()
        rows = self.executor.query(
            sql.SQL_HEARTBEAT, {"beats": dumps(payload), "lease": ts(now + visibility_timeout_ms)}
        )
        landed = {dashed(r[0]) for r in rows}
        # a miss is the caller's to judge: a renewal crossing the job's own settle is no lost lease
        return frozenset(b.job_id for b in beats if _canonical(b.job_id) in landed)

    def save_step(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        job, claim = hex_id(job_id), hex_id(ref.claim)
        landed: list[tuple[Any, ...]] = []
        if job is not None and claim is not None:
            landed = self.executor.query(
                sql.SQL_SAVE_STEP,
                {
                    "id": job,
                    "worker": ref.worker_id,
                    "claim": claim,
                    "name": step.name,
                    "seq": step.seq,
                    "status": step.status,
                    "output": dumps(step.output),
                    "started": ts(step.started_at_ms),
                    "finished": ts_or_none(step.finished_at_ms),
                    "wake": ts_or_none(step.wake_at_ms),
                    "meta": dumps(dict(step.meta)),
                },
            )
        if not landed:
            self._unowned(job_id, ref, "save_step")
        return bool(landed)

    def stats(self) -> list[QueueStats]:
        per: dict[str, dict[str, Any]] = {}
        for queue, state, count, oldest, paused in self.executor.query(sql.SQL_STATS, {"now": ts(self._now())}):
            entry = per.setdefault(queue, {"queue": queue, "paused": bool(paused), "oldest_ready_ms": None})
            entry[state] = count
            if oldest is not None:
                oldest_ms = ms(oldest)
                current = entry["oldest_ready_ms"]
                entry["oldest_ready_ms"] = oldest_ms if current is None else min(current, oldest_ms)
        return [QueueStats(**entry) for _, entry in sorted(per.items())]

    def purge_finished(self, *, before_ms: Mapping[JobState, int], limit: int = PURGE_BATCH) -> int:
        cutoffs = finished_cutoffs(before_ms, limit)
        if not cutoffs:
            return 0
        with self.executor.write():
            picked: list[tuple[Any, ...]] = []
            for state, before in cutoffs.items():
                picked += self.executor.query(
                    sql.SQL_PURGE_PICK, {"state": state, "before": ts(before), "limit": limit}
                )
            picked.sort(key=lambda r: (ms(r[1]), r[0]))
            ids = dumps([r[0] for r in picked[:limit]])
            gone = self.executor.query(sql.SQL_PURGE_DELETE, {"ids": ids})
            self.executor.query(sql.SQL_DELETE_STEPS, {"ids": dumps([r[0] for r in gone])})
        return len(gone)

    def close(self) -> None:
        """Stop the wake's watch and forget its subscribers; statements run on Django's connections, which
        Django closes."""
        self._wakes.close()


def _canonical(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return value
