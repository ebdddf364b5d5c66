"""The Postgres driver — the default: every statement an ``SQL_*`` constant, run on Django's own
connection for the configured alias (the transaction's connection inside ``atomic()``)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from contextlib import nullcontext
from dataclasses import replace
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
from ...core.clock import system_clock
from ...core.ids import new_id
from ..sql.driver import CLAIM_BURY_SCAN, ClaimAnswer, ClaimAsk, SqlDriver
from ..sql.rows import ClaimRow, StepRow, claimed_job, exhausted_job, step_record, worker_params
from .async_enqueue import AsyncEnqueue
from .executor import Executor, django_executor, from_jsonb, jsonb
from .operator import PostgresOperatorStore
from .queries import fairness
from .queries import jobs as sql
from .queries import scheduler as scheduler_sql
from .rows import POSTGRES, canonical_id, enqueue_rows, is_uuid, needs_transaction
from .stores import PostgresBackfillStore, PostgresLeaseStore, PostgresRateStore, PostgresSchedulerStore
from .wake import conninfo_for, pool_probe, start_queue_wake

# SQL_CLAIM's registry parameters when the claim carries no registry row (the upsert writes nothing).
NO_WORKER_ROW = dict.fromkeys(("id", "host", "pid", "started", "queues", "slots", "in_flight", "heartbeat"))


Statement = tuple[str, dict[str, Any]]
Plan = Generator[Statement, list[tuple[Any, ...]], list[Enqueued]]
"""An enqueue's statements, sans I/O: it yields ``(sql, params)``, is sent the rows each answers, and
returns the answers — so the sync driver and the async enqueue run one logic on their own connections."""


def drive(plan: Plan, run: Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]) -> list[Enqueued]:
    """Run ``plan``'s statements through ``run``; answer what it returns."""
    try:
        statement = next(plan)
        while True:
            statement = plan.send(run(*statement))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _holders(found: list[tuple[Any, ...]]) -> dict[int, tuple[Any, Any, bool]]:
    """SQL_ENQUEUE_HOLDERS' rows as the holder (id, run_id, whether it holds the id under another tenant) of
    each request row that inserted nothing, by ``ord``."""
    return {ord_: (job_id, run_id, bool(other)) for ord_, job_id, run_id, other in found}


class PostgresDriver(SqlDriver):
    """The whole driver protocol over Postgres. ``alias`` names the Django database.

    >>> set_job_driver(PostgresDriver(alias="default"))
    """

    name = "postgres"
    supports_wake = True
    supports_listen = True
    dialect = POSTGRES
    sql = sql
    parts = (
        PostgresOperatorStore,
        PostgresLeaseStore,
        PostgresSchedulerStore,
        PostgresBackfillStore,
        PostgresRateStore,
    )

    def __init__(self, *, prepared_statements: bool = True, **options: Any) -> None:
        """``options`` are :class:`~ultimate_jobs.drivers.sql.driver.SqlDriver`'s; ``prepared_statements=False``
        (``ULTIMATE_JOBS["PREPARED_STATEMENTS"]``) prepares none of the driver's statements on the connection."""
        self.prepared_statements = prepared_statements
        super().__init__(**options)
        self.async_enqueue = AsyncEnqueue(self)

    def _executor(self, alias: str) -> Executor:
        return django_executor(alias, prepared=self.prepared_statements)

    # -- the wake: LISTEN x_jobs_wake ----------------------------------------------------------

    def _start_wake(self, tell: Callable[[str], None]) -> Any:
        return start_queue_wake(
            conninfo=conninfo_for(connections[self.alias].settings_dict),
            probe=pool_probe(self.alias),
            on_wake=tell,
            clock=system_clock(),  # the proof deadline is wall time, whatever clock the queue reads
        )

    # -- enqueue -------------------------------------------------------------------------------

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        if not requests:
            return []
        # One statement is atomic on its own; a batch that may refuse a member — on_conflict="error", or a
        # caller's id that may name another tenant's row — needs a transaction so a refused request inserts
        # no row of its batch (all or nothing).
        guard = transaction.atomic(using=self.alias) if needs_transaction(requests) else nullcontext()
        with guard:
            return drive(self.enqueue_plan(requests), self._run_prepared)

    def _run_prepared(self, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self.executor.query(statement, params, binding="prepared")
        return rows

    def enqueue_plan(self, requests: Sequence[EnqueueRequest]) -> Plan:
        """The statements an enqueue of ``requests`` runs, as a plan (:func:`drive` runs it on Django's
        connection, :mod:`.async_enqueue` on an async one): ``SQL_ENQUEUE_ONE`` for one request (a plain
        INSERT, cheap to plan), ``SQL_ENQUEUE`` for a batch, then ``SQL_ENQUEUE_HOLDERS`` only for the
        requests that inserted nothing. Answers one :class:`Enqueued` per request, in order."""
        if len(requests) == 1:
            request = requests[0]
            now = self._now()
            run_at = now if request.run_at_ms is None else request.run_at_ms
            job_id, run_id = request.id or new_id(), request.run_id or new_id()
            params = {
                "id": job_id,
                "run_id": run_id,
                "name": request.name,
                "queue": request.queue,
                "tenant_id": request.tenant_id,
                "idempotency_key": request.idempotency_key,
                "input": jsonb(request.input),
                "state": "delayed" if run_at > now else "ready",
                "max_attempts": request.max_attempts,
                "priority": request.priority,
                "run_at": run_at,
                "now": now,
                "enqueued_by": request.enqueued_by,
                "traceparent": request.traceparent,
                "concurrency_key": request.concurrency_key,
                "lane": lane_of(request, self.fair_queues),
            }
            inserted = yield sql.SQL_ENQUEUE_ONE, params
            if inserted:
                return [Enqueued(str(inserted[0][0]), str(inserted[0][1]), False)]
            # inserted nothing: the holder of its id or live key, read under the ids this attempt minted
            rows = enqueue_rows([replace(request, id=job_id, run_id=run_id)], self.fair_queues)
            holders = _holders((yield sql.SQL_ENQUEUE_HOLDERS, {"rows": jsonb(rows)}))
            return [self._held(request, canonical_id(job_id), holders[0])]
        rows = enqueue_rows(requests, self.fair_queues)
        found = yield sql.SQL_ENQUEUE, {"rows": jsonb(rows), "now": self._now()}
        created = {str(r[0]) for r in found}
        # ids minted here are canonical already; a caller's may be spelled otherwise
        ids = [
            row["id"] if request.id is None else canonical_id(row["id"])
            for row, request in zip(rows, requests, strict=True)
        ]
        missing = [row for row, job_id in zip(rows, ids, strict=True) if job_id not in created]
        holders = _holders((yield sql.SQL_ENQUEUE_HOLDERS, {"rows": jsonb(missing)})) if missing else {}
        answers: list[Enqueued] = []
        for row, own_id, request in zip(rows, ids, requests, strict=True):
            if own_id in created:
                run_id = row["run_id"] if request.run_id is None else canonical_id(row["run_id"])
                answers.append(Enqueued(own_id, run_id, False))
                continue
            answers.append(self._held(request, own_id, holders[row["ord"]]))
        return answers

    # -- claim: one statement ------------------------------------------------------------------

    def _claim(self, ask: ClaimAsk) -> ClaimAnswer:
        record = ask.record
        registry = worker_params(record, POSTGRES) if record is not None else NO_WORKER_ROW
        fair = [name in self.fair_queues for name in ask.names]
        rows = self.executor.query(
            fairness.SQL_CLAIM_FAIR if any(fair) else sql.SQL_CLAIM,
            {
                "queues": ask.names,
                "caps": ask.caps,
                "fair": fair,
                "bury": CLAIM_BURY_SCAN,
                "now": self._now(),
                "vt": ask.vt,
                "worker": ask.worker_id,
                "drop": sorted(ask.drop),
                "record": record is not None,
                **{f"w_{k}": v for k, v in registry.items()},
            },
            binding="generic",
        )
        named = [ClaimRow._make(row) for row in rows]
        claimed = [claimed_job(r, self._steps(r.steps), POSTGRES) for r in named if r.kind == "claimed"]
        return claimed, [exhausted_job(r, POSTGRES) for r in named if r.kind == "buried"]

    @staticmethod
    def _steps(steps: str) -> tuple[StepRecord, ...]:
        """A claimed row's completed steps, from SQL_CLAIM's JSON array of STEP_VALUES arrays."""
        return () if steps == "[]" else tuple(step_record(StepRow._make(s), POSTGRES) for s in from_jsonb(steps))

    # -- settles -------------------------------------------------------------------------------

    def _fence(self, job_id: str, claim: str) -> tuple[str, str] | None:
        return (job_id, claim) if is_uuid(job_id) else None

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        valid = [a for a in acks if is_uuid(a.job_id)]
        params = {
            "ids": [a.job_id for a in valid],
            "workers": [a.ref.worker_id for a in valid],
            "claims": [a.ref.claim for a in valid],
            "durations": [a.duration_ms for a in valid],
            "waits": [a.wait_ms for a in valid],
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

    def _nack(self, fenced: tuple[str, str], worker_id: str, options: NackOptions) -> bool:
        params = self._nack_params(fenced, worker_id, options, self._now())
        params.update(counter=nack_counter(options), duration=options.duration_ms, wait=options.wait_ms)
        return bool(self.executor.query(sql.SQL_NACK, params, binding="prepared"))

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

    # -- upkeep --------------------------------------------------------------------------------

    def rollup_counters(self) -> int:
        [(folded,)] = self.executor.query(scheduler_sql.SQL_ROLLUP_COUNTERS, {"now": self._now()})
        return int(folded)

    def _purge(self, cutoffs: dict[JobState, int], limit: int) -> int:
        params = {"states": list(cutoffs), "before": list(cutoffs.values()), "limit": limit}
        with transaction.atomic(using=self.alias):
            self.executor.query(sql.SQL_JIT_OFF)
            [(count,)] = self.executor.query(sql.SQL_PURGE_FINISHED, params)
        return int(count)
