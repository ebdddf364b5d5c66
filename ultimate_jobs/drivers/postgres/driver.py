"""The Postgres driver — the default: every statement an ``SQL_*`` constant, run on Django's own
connection for the configured alias (the transaction's connection inside ``atomic()``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from django.db import IntegrityError, connections, transaction

from ...clock import Clock, system_clock
from ...errors import ClaimQueuesEmptyError, JobDuplicateError
from ...logs import log_event
from ..base import (
    DEFAULT_VISIBILITY_TIMEOUT_MS,
    PURGE_BATCH,
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
    QueueStats,
    StepRecord,
    WorkerInfo,
    nack_counter,
    nack_state,
)
from ..purging import finished_cutoffs
from ..wake_hub import WakeHub
from . import sql
from .backfills import PostgresBackfillStore
from .executor import Executor, django_executor, from_jsonb, jsonb
from .rows import claimed_job, enqueue_rows, job_record, step_record, worker_row
from .scheduler import PostgresLeaderStore, PostgresSchedulerStore
from .wake import QueueWake, conninfo_for, pool_probe, start_queue_wake

# SQL_CLAIM's registry parameters when the claim carries no registry row (the upsert writes nothing).
NO_WORKER_ROW = dict.fromkeys(("id", "host", "pid", "started", "queues", "slots", "in_flight", "heartbeat"))

# Rows a claim may lock beyond its caps, per queue, to bury lapsed final attempts on the way.
CLAIM_BURY_SCAN = 16


class PostgresDriver:
    """The whole driver protocol over Postgres. ``alias`` names the Django database.

    >>> set_job_driver(PostgresDriver(alias="default"))
    """

    name = "postgres"
    supports_listen = True

    def __init__(
        self,
        *,
        alias: str = "default",
        clock: Clock | None = None,
        visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS,
        executor: Executor | None = None,
    ) -> None:
        self.executor = executor or django_executor(alias)
        self.alias = self.executor.alias
        self.clock = clock or system_clock()
        self.visibility_timeout_ms = visibility_timeout_ms
        from .introspect import PostgresIntrospection

        self._introspect = PostgresIntrospection(self)
        self._leases = PostgresLeaseStore(self)
        self._leader = PostgresLeaderStore(self)
        self._scheduler_state = PostgresSchedulerStore(self)
        self._backfills = PostgresBackfillStore(self)
        self._wakes: WakeHub[QueueWake] = WakeHub(self._start_wake)

    @property
    def introspect(self) -> Any:
        return self._introspect

    @property
    def leases(self) -> PostgresLeaseStore:
        return self._leases

    @property
    def leader(self) -> PostgresLeaderStore:
        return self._leader

    @property
    def scheduler_state(self) -> PostgresSchedulerStore:
        return self._scheduler_state

    @property
    def backfills(self) -> PostgresBackfillStore:
        return self._backfills

    def _now(self) -> int:
        return self.clock.now_ms()

    # -- the wake ------------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Hear the queue names other processes announce (LISTEN x_jobs_wake). The session starts with
        the first subscriber — only the worker role subscribes, so an enqueuing web process holds none —
        and stops with the last. Answers an unsubscribe."""
        return self._wakes.subscribe(listener)

    def _start_wake(self, tell: Callable[[str], None]) -> QueueWake:
        return start_queue_wake(
            conninfo=conninfo_for(connections[self.alias].settings_dict),
            probe=pool_probe(self.alias),
            on_wake=tell,
            clock=system_clock(),  # the proof deadline is wall time, whatever clock the queue reads
        )

    def wake_is_live(self) -> bool:
        """Whether the LISTEN session is proven (the worker then raises its idle ceiling to 5 s)."""
        return self._wakes.is_live()

    # -- enqueue -------------------------------------------------------------------------------

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        return self.enqueue_many([request])[0]

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        if not requests:
            return []
        if len(requests) == 1:
            return [self._enqueue_one(requests[0])]
        rows = enqueue_rows(requests)
        # One statement is atomic on its own; a batch that may refuse a member needs a transaction so a
        # refused request inserts no row of its batch (all or nothing).
        guard = (
            transaction.atomic(using=self.alias)
            if len(requests) > 1 and any(r.on_conflict == "error" for r in requests)
            else nullcontext()
        )
        with guard:
            found = self.executor.query(sql.SQL_ENQUEUE, {"rows": jsonb(rows), "now": self._now()}, binding="server")
            inserted = {str(r[0]) for r in found}
            # ids minted here are canonical already; a caller's may be spelled otherwise
            ids = [
                row["id"] if request.id is None else canonical_id(row["id"])
                for row, request in zip(rows, requests, strict=True)
            ]
            missing = [row for row, job_id in zip(rows, ids, strict=True) if job_id not in inserted]
            holders = self._holders(missing) if missing else {}
            answers: list[Enqueued] = []
            for row, own_id, request in zip(rows, ids, requests, strict=True):
                if own_id in inserted:
                    run_id = row["run_id"] if request.run_id is None else canonical_id(row["run_id"])
                    answers.append(Enqueued(own_id, run_id, False))
                    continue
                answers.append(self._held(request, own_id, holders[row["ord"]]))
        return answers

    def _enqueue_one(self, request: EnqueueRequest) -> Enqueued:
        """One request through SQL_ENQUEUE_ONE; the holder is looked up only when it inserted nothing."""
        rows = enqueue_rows([request])
        now = self._now()
        params = {key: value for key, value in rows[0].items() if key not in ("ord", "run_at_ms")}
        run_at = now if rows[0]["run_at_ms"] is None else rows[0]["run_at_ms"]
        params.update(
            input=jsonb(params["input"]), run_at=run_at, state="delayed" if run_at > now else "ready", now=now
        )
        inserted = self.executor.query(sql.SQL_ENQUEUE_ONE, params, binding="server")
        if inserted:
            return Enqueued(str(inserted[0][0]), str(inserted[0][1]), False)
        return self._held(request, canonical_id(rows[0]["id"]), self._holders(rows)[0])

    def _held(self, request: EnqueueRequest, own_id: str, holder: tuple[Any, Any]) -> Enqueued:
        """The answer to a request that inserted nothing: the row holding its id or live key (deduped),
        ``X_JOB_DUPLICATE`` when the caller asked for an error, or when the holder is gone already."""
        job_id, run_id = holder
        if job_id is None:
            raise JobDuplicateError(
                f"{request.name}: key {request.idempotency_key!r} conflicted with a row that is gone; enqueue again",
                {"job": request.name, "key": request.idempotency_key},
            )
        if request.on_conflict == "error" and str(job_id) != own_id:
            raise JobDuplicateError(
                f"{request.name}: idempotency key {request.idempotency_key!r} is held by live job {job_id}; "
                "enqueue with on_conflict='dedupe' to answer that job instead",
                {"job": request.name, "key": request.idempotency_key, "holder": str(job_id)},
            )
        return Enqueued(str(job_id), str(run_id), True)

    def _holders(self, rows: list[dict[str, Any]]) -> dict[int, tuple[Any, Any]]:
        """The holder (id, run_id) of each request row that inserted nothing, by ``ord``."""
        found = self.executor.query(sql.SQL_ENQUEUE_HOLDERS, {"rows": jsonb(rows)}, binding="server")
        return {ord_: (job_id, run_id) for ord_, job_id, run_id in found}

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
        caps = [min(limit, (queue_limits or {}).get(q, limit)) for q in names]
        rows = self.executor.query(
            sql.SQL_CLAIM,
            {
                "queues": names,
                "caps": caps,
                "bury": CLAIM_BURY_SCAN,
                "now": self._now(),
                "vt": visibility_timeout_ms,
                "worker": worker_id,
                "drop": sorted(drop_exhausted),
                "record": record is not None,
                **{f"w_{k}": v for k, v in (worker_row(record) if record is not None else NO_WORKER_ROW).items()},
            },
            binding="prepared",
        )
        claimed: list[ClaimedJob] = []
        exhausted: list[ExhaustedJob] = []
        for row in rows:
            if row[0] == "claimed":
                steps = () if row[-1] == "[]" else tuple(step_record(s) for s in from_jsonb(row[-1]))
                claimed.append(claimed_job(row[1:-1], steps))
            else:
                buried = job_record(row[1:-1])
                exhausted.append(
                    ExhaustedJob(
                        id=buried.id,
                        run_id=buried.run_id,
                        name=buried.name,
                        queue=buried.queue,
                        tenant_id=buried.tenant_id,
                        input=buried.input,
                        attempt=buried.attempts,
                        state="failed" if buried.state == "failed" else "dead",
                    )
                )
        claimed.sort(key=lambda job: (-job.priority, job.run_at_ms, job.id))
        if len(claimed) > limit:  # per-queue caps summed past the overall limit: hand the rest back now
            for extra in claimed[limit:]:
                self.nack(extra.id, extra.ref, NackOptions(count_attempt=False, run_at_ms=extra.run_at_ms))
            claimed = claimed[:limit]
        return Claim(jobs=claimed, buried=exhausted)

    # -- settles -------------------------------------------------------------------------------

    def _unowned(self, job_id: str, ref: ClaimRef, op: str) -> None:
        log_event(logging.WARNING, "jobs.settle.unowned", job_id=job_id, op=op, worker_id=ref.worker_id)

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None) -> bool:
        return job_id in self.ack_many([Ack(job_id, ref, duration_ms or 0)])

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        valid = [a for a in acks if is_uuid(a.job_id)]
        params = {
            "ids": [a.job_id for a in valid],
            "workers": [a.ref.worker_id for a in valid],
            "claims": [a.ref.claim for a in valid],
            "durations": [a.duration_ms for a in valid],
            "now": self._now(),
        }
        landed = (
            frozenset(str(r[0]) for r in self.executor.query(sql.SQL_ACK, params, binding="prepared"))
            if valid
            else frozenset()
        )
        for a in acks:
            if a.job_id not in landed:
                self._unowned(a.job_id, a.ref, "ack")
        return landed

    def nack(self, job_id: str, ref: ClaimRef, options: NackOptions) -> bool:
        if not is_uuid(job_id):
            self._unowned(job_id, ref, "nack")
            return False
        landed = self.executor.query(
            sql.SQL_NACK,
            {
                "id": job_id,
                "worker": ref.worker_id,
                "claim": ref.claim,
                "state": nack_state(options),
                "uncount": 0 if options.count_attempt else 1,
                "run_at": options.run_at_ms,
                "error": options.error,
                "code": options.code,
                "counter": nack_counter(options),
                "duration": options.duration_ms,
                "now": self._now(),
            },
            binding="prepared",
        )
        if not landed:
            self._unowned(job_id, ref, "nack")
        return bool(landed)

    def heartbeat(self, beats: Sequence[Heartbeat], *, visibility_timeout_ms: int) -> frozenset[str]:
        valid = [b for b in beats if is_uuid(b.job_id)]
        params = {
            "ids": [b.job_id for b in valid],
            "workers": [b.ref.worker_id for b in valid],
            "claims": [b.ref.claim for b in valid],
            "vt": visibility_timeout_ms,
            "now": self._now(),
        }
        rows = self.executor.query(sql.SQL_HEARTBEAT, params, binding="prepared") if valid else []
        # a miss is the caller's to judge: a renewal crossing the job's own settle is no lost lease
        return frozenset(str(r[0]) for r in rows)

    def save_step(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        if not is_uuid(job_id):
            self._unowned(job_id, ref, "save_step")
            return False
        landed = self.executor.query(
            sql.SQL_SAVE_STEP,
            {
                "id": job_id,
                "worker": ref.worker_id,
                "claim": ref.claim,
                "name": step.name,
                "seq": step.seq,
                "status": step.status,
                "output": jsonb(step.output),
                "started": step.started_at_ms,
                "finished": step.finished_at_ms,
                "wake": step.wake_at_ms,
                "meta": jsonb(dict(step.meta)),
            },
            binding="prepared",
        )
        if not landed:
            self._unowned(job_id, ref, "save_step")
        return bool(landed)

    def stats(self) -> list[QueueStats]:
        per: dict[str, dict[str, Any]] = {}
        for queue, state, count, oldest, paused in self.executor.query(sql.SQL_STATS, {"now": self._now()}):
            entry = per.setdefault(queue, {"queue": queue, "paused": paused, "oldest_ready_ms": None})
            entry[state] = count
            if oldest is not None:
                current = entry["oldest_ready_ms"]
                entry["oldest_ready_ms"] = oldest if current is None else min(current, oldest)
        return [QueueStats(**entry) for _, entry in sorted(per.items())]

    def purge_finished(self, *, before_ms: Mapping[JobState, int], limit: int = PURGE_BATCH) -> int:
        cutoffs = finished_cutoffs(before_ms, limit)
        if not cutoffs:
            return 0
        params = {"states": list(cutoffs), "before": list(cutoffs.values()), "limit": limit}
        with transaction.atomic(using=self.alias):
            self.executor.query(sql.SQL_JIT_OFF)
            [(count,)] = self.executor.query(sql.SQL_PURGE_FINISHED, params)
        return int(count)

    def close(self) -> None:
        """Stop the wake session; statements run on Django's connections, which Django closes."""
        self._wakes.close()


def canonical_id(value: str) -> str:
    """A row id as Postgres prints a uuid (lower case, hyphenated); a value that is no uuid as it is."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return value


def is_uuid(value: str) -> bool:
    """Whether ``value`` can name a row of ``x_jobs`` (ids are UUIDs); anything else names none."""
    try:
        uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


class PostgresLeaseStore:
    """Fleet slots in ``x_job_leases`` (see the ``SQL_LEASE_*`` statements)."""

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver

    def acquire(self, key: str, holder: str, *, limit: int, ttl_ms: int) -> bool:
        params = {"key": key, "holder": holder, "limit": limit, "ttl": ttl_ms, "now": self._d.clock.now_ms()}
        try:
            with transaction.atomic(using=self._d.alias):
                self._d.executor.query(sql.SQL_LEASE_LOCK, params)
                return bool(self._d.executor.query(sql.SQL_LEASE_ACQUIRE, params)[0][0])
        except IntegrityError:  # another transaction inserted this very holder between the lock and us
            return False

    def renew(self, key: str, holder: str, *, ttl_ms: int) -> bool:
        params = {"key": key, "holder": holder, "ttl": ttl_ms, "now": self._d.clock.now_ms()}
        return bool(self._d.executor.query(sql.SQL_LEASE_RENEW, params))

    def release(self, key: str, holder: str) -> None:
        self._d.executor.query(sql.SQL_LEASE_RELEASE, {"key": key, "holder": holder})

    def holders(self, key: str) -> list[str]:
        rows = self._d.executor.query(sql.SQL_LEASE_HOLDERS, {"key": key, "now": self._d.clock.now_ms()})
        return [r[0] for r in rows]
