"""The SQLite driver — the embedded default: the whole driver protocol on Django's SQLite connection for
the configured alias, over the same tables and migrations as the Postgres driver. Every statement is an
``SQL_*`` constant (:mod:`.queries`).

SQLite has one writer at a time and no LISTEN/NOTIFY, so:

- an operation of several statements (a claim, a settle and its counter) runs in one ``BEGIN IMMEDIATE``
  transaction — as atomic as the Postgres driver's single statement, and two claims never see one row;
- an enqueue in the worker's own process wakes it at once (:meth:`SqliteDriver.subscribe`); a worker in
  another process hears it through a watch on ``PRAGMA data_version`` (:mod:`.watch`) within about
  100 ms, and its poll — 250 ms, backing off to 5 s while idle — stays the guarantee behind it.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from typing import Any

from django.db import connections, transaction

from ...contracts.jobs import (
    Ack,
    Enqueued,
    EnqueueRequest,
    Heartbeat,
    JobState,
    NackOptions,
    StepRecord,
    lane_of,
    nack_counter,
)
from ...contracts.series import COUNTER_TIERS, COUNTER_VALUES, SAMPLE_KEEP_MS, WAIT_BINS, wait_bin
from ...core.clock import Clock
from ...core.ids import new_id
from ...defaults import DEFAULT_VISIBILITY_TIMEOUT_MS
from ...errors import DriverUnavailableError, InvariantError
from ..lanes import LanePick, lanes_to_serve, share_of
from ..sql.dialect import canonical_id
from ..sql.driver import CLAIM_BURY_SCAN, ClaimAnswer, ClaimAsk, SqlDriver
from ..sql.rows import JobRow, StepRow, claimed_job, exhausted_job, row_class, step_record, worker_params
from .executor import SqliteExecutor
from .operator import SqliteOperatorStore
from .queries import fairness
from .queries import jobs as sql
from .queries import stores as sql_stores
from .rows import SQLITE, dashed, dumps, hex_id, ms, ts
from .stores import SqliteBackfillStore, SqliteLeaseStore, SqliteRateStore, SqliteSchedulerStore
from .watch import WATCH_INTERVAL_MS, DataVersionWatch

MIN_SQLITE = (3, 35, 0)
"""RETURNING (3.35) is what every settle answers through; UPDATE … FROM (3.33) and json_each come before."""

WAKE_DUE_WITHIN_MS = 1_000
"""An enqueue announces its queue to this process's worker when the row is due within this long."""

COUNTER_WIDTH_MS = 60_000

Candidate = row_class("Candidate", ("id", "name", "state", "attempts", "max_attempts", "priority", "run_at"))
"""A row SQL_CLAIM_DUE or SQL_CLAIM_LAPSED answers."""


def bucket_of(now_ms: int) -> str:
    """The 1-minute counter bucket holding ``now_ms``, as column text."""
    return ts(now_ms - now_ms % COUNTER_WIDTH_MS)


class SqliteDriver(SqlDriver):
    """The whole driver protocol over SQLite. ``alias`` names the Django database (an SQLite one);
    ``watch_interval_ms`` is how often a subscribed worker's watch reads ``PRAGMA data_version`` (``None``:
    no cross-process wake, only the poll).

    >>> set_job_driver(SqliteDriver(alias="default", watch_interval_ms=None))  # no watch: the poll only
    """

    name = "sqlite"
    supports_wake = True
    supports_listen = True  # the watch on the file carries other processes' commits
    dialect = SQLITE
    sql = sql
    parts = (SqliteOperatorStore, SqliteLeaseStore, SqliteSchedulerStore, SqliteBackfillStore, SqliteRateStore)

    def __init__(
        self,
        *,
        alias: str = "default",
        clock: Clock | None = None,
        visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS,
        watch_interval_ms: int | None = WATCH_INTERVAL_MS,
        fair_queues: Iterable[str] = (),
    ) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise DriverUnavailableError(
                f"the sqlite driver needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer (RETURNING); this "
                f"Python links SQLite {sqlite3.sqlite_version}. Upgrade Python's SQLite, or use the postgres driver",
                {"sqlite": sqlite3.sqlite_version},
            )
        self.watch_interval_ms = watch_interval_ms
        super().__init__(alias=alias, clock=clock, visibility_timeout_ms=visibility_timeout_ms, fair_queues=fair_queues)

    def _executor(self, alias: str) -> SqliteExecutor:
        return SqliteExecutor(alias)

    # -- the wake: this process's commits at once, another's through the file's data_version ----

    def _start_wake(self, tell: Callable[[str], None]) -> DataVersionWatch | None:
        """Hear the queues that become due: this process's enqueues, due retries, requeues, promotes and
        resumes at once (after their commit, :meth:`announce`), and another process's commits through the
        watch on the file (:class:`~.watch.DataVersionWatch`)."""
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
            "lane": lane_of(request, self.fair_queues),
            "_due": run_at <= now + WAKE_DUE_WITHIN_MS,
        }

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
        guard = (  # a caller's id may name another tenant's row: refused, so the batch inserts nothing
            self.executor.write()
            if len(rows) > 1 and any(r.on_conflict == "error" or r.id is not None for r in requests)
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
                found = self.executor.query(
                    sql.SQL_ENQUEUE_HOLDER, {k: row[k] for k in ("id", "name", "tenant_id", "idempotency_key")}
                )
                answers.append(self._held(request, dashed(row["id"]), found[0] if found else None))
        return answers

    # -- claim: one BEGIN IMMEDIATE transaction ------------------------------------------------

    def _claim(self, ask: ClaimAsk) -> ClaimAnswer:
        now = self._now()
        now_ts = ts(now)
        q = self.executor.query
        with self.executor.write():
            if ask.record is not None:
                q(sql.SQL_RECORD_WORKER, worker_params(ask.record, SQLITE))
            paused = {r[0] for r in q(sql.SQL_PAUSED_AMONG, {"queues": dumps(ask.names)})}
            take: list[str] = []
            bury: list[str] = []
            for queue, cap in zip(ask.names, ask.caps, strict=True):
                if queue in paused or cap <= 0:
                    continue
                plan = self._lanes_first(queue, cap, now_ts) if queue in self.fair_queues else None
                lanes_first = plan.first if plan is not None else []
                # the queue's own order only where the lanes left room (as SQL_CLAIM_FAIR reads it)
                due = (
                    q(sql.SQL_CLAIM_DUE, {"queue": queue, "now": now_ts, "cap": cap}) if len(lanes_first) < cap else []
                )
                lapsed = q(sql.SQL_CLAIM_LAPSED, {"queue": queue, "now": now_ts, "cap": cap + CLAIM_BURY_SCAN})
                candidates = [Candidate._make(row) for row in due]
                for row in map(Candidate._make, lapsed):
                    if row.attempts >= row.max_attempts:
                        bury.append(row.id)
                    else:
                        candidates.append(row)
                candidates.sort(key=lambda r: (-r.priority, ms(r.run_at), r.id))
                picked = set(lanes_first)
                taken = (lanes_first + [r.id for r in candidates if r.id not in picked])[:cap]
                if plan is not None:
                    self._turn(queue, plan, set(taken), now_ts)
                take.extend(taken)
            buried = [
                JobRow._make(row)
                for row in (
                    q(sql.SQL_BURY, {"ids": dumps(bury), "drop": dumps(sorted(ask.drop)), "now": now_ts})
                    if bury
                    else []
                )
            ]
            self._count_buried(buried, now)
            params = {"ids": dumps(take), "worker": ask.worker_id, "lease": ts(now + ask.vt), "now": now_ts}
            claimed_rows = [JobRow._make(row) for row in (q(sql.SQL_CLAIM_TAKE, params) if take else [])]
            steps: dict[str, list[StepRecord]] = {}
            if claimed_rows:
                for job_id, *step in q(sql.SQL_STEPS_OF, {"ids": dumps([r.id for r in claimed_rows])}):
                    steps.setdefault(job_id, []).append(step_record(StepRow._make(step), SQLITE))
        claimed = [claimed_job(row, tuple(steps.get(row.id, ())), SQLITE) for row in claimed_rows]
        return claimed, [exhausted_job(row, SQLITE) for row in buried]

    def _lanes_first(self, queue: str, cap: int, now_ts: str) -> LanePick[str]:
        """The fair part of a claim of ``queue`` (:mod:`..lanes`): the lanes it serves and their due row ids."""
        q = self.executor.query
        active = [(at, lane) for lane, at in q(fairness.SQL_TURNS_NEXT, {"queue": queue, "cap": cap})]
        waking = [(at, lane) for lane, at in q(fairness.SQL_TURNS_WAKING, {"queue": queue, "now": now_ts, "cap": cap})]
        lanes = lanes_to_serve(active, waking, cap)
        share = share_of(cap, lanes)
        rows = {
            lane: [
                r[0] for r in q(fairness.SQL_LANE_DUE, {"queue": queue, "lane": lane, "now": now_ts, "share": share})
            ]
            for lane in lanes
        }
        return LanePick(lanes, [lane for _, lane in waking], rows)

    def _turn(self, queue: str, pick: LanePick[str], taken: set[str], now_ts: str) -> None:
        """Move the lanes along after a fair claim of ``queue`` took ``taken`` (:meth:`LanePick.moves`)."""
        served, woken, retired = pick.moves(taken.__contains__)
        q = self.executor.query
        for statement, lanes in ((fairness.SQL_TURNS_SERVED, served), (fairness.SQL_TURNS_WOKEN, woken)):
            if lanes:
                q(statement, {"queue": queue, "lanes": dumps(lanes), "now": now_ts})
        if retired:
            q(fairness.SQL_TURNS_RETIRE, {"queue": queue, "lanes": dumps(retired)})

    def _count_buried(self, buried: list[Any], now: int) -> None:
        per: dict[str, list[int]] = {}
        for row in buried:
            counts = per.setdefault(row.name, [0, 0])
            counts[0 if row.state == "failed" else 1] += 1
        for name, (failed, dead) in per.items():
            self._count(name, now, failed=failed, dead=dead)

    def _count_waits(self, waits: Counter[tuple[str, int]], now: int) -> None:
        """Add ``waits`` (attempts per queue and bin) to their queues' 1-minute ``x_job_waits`` buckets."""
        for (queue, index), count in waits.items():
            self.executor.query(
                sql.SQL_COUNT_WAITS, {"queue": queue, "bucket": bucket_of(now), "bin": index, "count": count}
            )

    def _count(
        self,
        job: str,
        now: int,
        *,
        done: int = 0,
        retried: int = 0,
        failed: int = 0,
        dead: int = 0,
        duration: int = 0,
        run_bins: Sequence[int] = (),
    ) -> None:
        """Move ``job``'s 1-minute counter bucket holding ``now`` (``run_bins``: settles per run-time bin)."""
        bins = {f"run_bin_{i}": run_bins[i] if i < len(run_bins) else 0 for i in range(WAIT_BINS)}
        params = {"job": job, "bucket": bucket_of(now), "done": done, "retried": retried, "failed": failed}
        self.executor.query(sql.SQL_COUNT, {**params, "dead": dead, "duration": duration, **bins})

    # -- settles -------------------------------------------------------------------------------

    def _fence(self, job_id: str, claim: str) -> tuple[str, str] | None:
        job, token = hex_id(job_id), hex_id(claim)
        return None if job is None or token is None else (job, token)

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        fenced = [(a, hex_id(a.job_id), hex_id(a.ref.claim)) for a in acks]
        valid = [(a, job, claim) for a, job, claim in fenced if job is not None and claim is not None]
        landed: set[str] = set()
        if valid:
            now = self._now()
            payload = dumps([{"id": job, "worker": a.ref.worker_id, "claim": claim} for a, job, claim in valid])
            given = {job: a for a, job, _ in valid}
            with self.executor.write():
                rows = self.executor.query(sql.SQL_ACK, {"acks": payload, "now": ts(now)})
                per: dict[str, list[int]] = {}  # done, duration, then a count per run-time bin
                waits: Counter[tuple[str, int]] = Counter()
                for job, name, queue in rows:
                    counts = per.setdefault(name, [0, 0] + [0] * WAIT_BINS)
                    counts[0] += 1
                    counts[1] += given[job].duration_ms
                    counts[2 + wait_bin(given[job].duration_ms)] += 1
                    wait = given[job].wait_ms
                    if wait is not None:
                        waits[queue, wait_bin(wait)] += 1
                for name, (done, duration, *run_bins) in per.items():
                    self._count(name, now, done=done, duration=duration, run_bins=run_bins)
                self._count_waits(waits, now)
            landed = {dashed(job) for job, _, _ in rows}
        answered = frozenset(a.job_id for a in acks if canonical_id(a.job_id) in landed)
        for a in acks:
            if a.job_id not in answered:
                self._unowned(a.job_id, a.ref, "ack")
        return answered

    def _nack(self, fenced: tuple[str, str], worker_id: str, options: NackOptions) -> bool:
        now = self._now()
        counter = nack_counter(options)
        with self.executor.write():
            rows = self.executor.query(sql.SQL_NACK, self._nack_params(fenced, worker_id, options, now))
            if rows and counter is not None:
                name = rows[0][0]  # SQL_NACK answers (name, queue, state, run_at)
                self._count(
                    name,
                    now,
                    retried=int(counter == "retried"),
                    failed=int(counter == "failed"),
                    dead=int(counter == "dead"),
                    duration=options.duration_ms or 0,
                    run_bins=[int(i == wait_bin(options.duration_ms or 0)) for i in range(WAIT_BINS)],
                )
                if options.wait_ms is not None:
                    self._count_waits(Counter({(rows[0][1], wait_bin(options.wait_ms)): 1}), now)
        if not rows:
            return False
        _name, queue, state, run_at = rows[0]
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
        return frozenset(b.job_id for b in beats if canonical_id(b.job_id) in landed)

    # -- upkeep --------------------------------------------------------------------------------

    def rollup_counters(self) -> int:
        with self.executor.write():
            return self.rollup_at(self._now())

    def rollup_at(self, now_ms: int) -> int:
        """The rollup at ``now_ms``, on the caller's transaction (the leader runs it in its renewal's), with the
        queues' depth sample it takes."""
        cutoffs = {f"expired_{i}": ts(now_ms - keep - width) for i, (width, keep) in enumerate(COUNTER_TIERS)}
        self.executor.query(sql_stores.SQL_SAMPLE_QUEUES, {"bucket": bucket_of(now_ms), "now": ts(now_ms)})
        self.executor.query(sql_stores.SQL_FORGET_SAMPLES, {"before": ts(now_ms - SAMPLE_KEEP_MS)})
        self._rollup_waits(now_ms, cutoffs)
        expired = self.executor.query(sql_stores.SQL_ROLLUP_EXPIRED, cutoffs)
        if not expired:
            return 0
        folded: dict[tuple[str, int, int], list[int]] = {}  # done … duration, then the run-time bins
        for _, job, width, bucket, *values in expired:
            bucket_ms = ms(bucket)
            dest = fold_destination(width, bucket_ms, now_ms)
            if dest is None:
                continue  # past every tier's retention: dropped
            sums = folded.setdefault((job, dest, bucket_ms - bucket_ms % dest), [0] * COUNTER_VALUES)
            for i, value in enumerate(values):
                sums[i] += value
        self.executor.query(sql_stores.SQL_ROLLUP_DELETE, {"ids": dumps([row[0] for row in expired])})
        for (job, width, bucket_ms), (done, retried, failed, dead, duration, *run_bins) in folded.items():
            counts = {"done": done, "retried": retried, "failed": failed, "dead": dead, "duration": duration}
            bins = {f"run_bin_{i}": count for i, count in enumerate(run_bins)}
            params = {"job": job, "width": width, "bucket": ts(bucket_ms), **counts, **bins}
            self.executor.query(sql_stores.SQL_COUNTER_ADD, params)
        return len(expired)

    def _rollup_waits(self, now_ms: int, cutoffs: dict[str, str]) -> None:
        """Fold the wait bins past their tier's retention (``x_job_waits``), as the counters fold."""
        expired = self.executor.query(sql_stores.SQL_ROLLUP_WAITS_EXPIRED, cutoffs)
        if not expired:
            return
        folded: Counter[tuple[str, int, int, int]] = Counter()
        for _, queue, width, bucket, index, count in expired:
            bucket_ms = ms(bucket)
            dest = fold_destination(width, bucket_ms, now_ms)
            if dest is not None:  # else past every tier's retention: dropped
                folded[queue, dest, bucket_ms - bucket_ms % dest, index] += count
        self.executor.query(sql_stores.SQL_ROLLUP_WAITS_DELETE, {"ids": dumps([row[0] for row in expired])})
        for (queue, width, bucket_ms, index), count in folded.items():
            params = {"queue": queue, "width": width, "bucket": ts(bucket_ms), "bin": index, "count": count}
            self.executor.query(sql_stores.SQL_WAIT_ADD, params)

    def _purge(self, cutoffs: dict[JobState, int], limit: int) -> int:
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


def fold_destination(width_ms: int, bucket_ms: int, now_ms: int) -> int | None:
    """The width of the narrowest wider counter tier still retaining the bucket ``(width_ms, bucket_ms)`` at
    ``now_ms`` — where the rollup adds it — or ``None`` when none does (the bucket is dropped)."""
    return next(
        (w for w, keep in sorted(COUNTER_TIERS) if w > width_ms and bucket_ms - bucket_ms % w + w > now_ms - keep),
        None,
    )
