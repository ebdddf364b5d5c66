"""The Redis driver: every operation one Lua script, registered once and called by SHA.

Keys share one hash tag — ``{x}`` for the default prefix ``x`` — so every key of a store lives in one
Redis Cluster slot and each script runs atomically where that slot lives (two stores on one server or
cluster differ by ``prefix``). Instants come from the driver's clock, not the server's, so a frozen
clock drives the Redis driver exactly as it drives the memory one.

>>> set_job_driver(RedisDriver.from_url("redis://127.0.0.1:6379/0"))
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.commands.core import Script
from redis.retry import Retry

from ...contracts.base import BaseDriver
from ...contracts.jobs import (
    Ack,
    Claim,
    ClaimRef,
    Enqueued,
    EnqueueRequest,
    Heartbeat,
    JobState,
    NackOptions,
    Progress,
    StepRecord,
    id_taken,
    nack_counter,
    nack_state,
)
from ...contracts.operator import MAX_WORKER_IN_FLIGHT, QueueStats, WorkerInfo, finished_cutoffs
from ...contracts.series import COUNTER_TIERS, SAMPLE_KEEP_MS, queue_samples_of, wait_bin
from ...core.clock import Clock, system_clock
from ...core.logs import log_event
from ...defaults import DEFAULT_VISIBILITY_TIMEOUT_MS, PURGE_BATCH
from ...errors import (
    DriverUnavailableError,
    InvariantError,
    JobDuplicateError,
    StepAtomicUnsupportedError,
)
from ..wake_hub import WakeHub
from .operator import RedisOperatorStore
from .queries import SCRIPTS
from .rows import claimed_job, exhausted_job, progress_json, request_doc, step_json, text
from .stores import RedisBackfillStore, RedisLeaderStore, RedisLeaseStore, RedisRateStore, RedisSchedulerStore
from .wake import RedisWake

DONE_TTL_MS = 7 * 86_400_000
"""How long a done row and its steps are kept by default (a week); dead and failed rows stay."""

R = TypeVar("R")


def client_from_url(url: str) -> redis.Redis:
    """A redis-py client for ``url`` that decodes replies and retries a dropped connection three times
    with backoff (a server restart, a failover), checking idle connections before reuse."""
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        health_check_interval=30,
        socket_keepalive=True,
        socket_connect_timeout=5,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def bucket_of(now: int) -> int:
    """The start of the narrowest counter bucket holding ``now``."""
    width = COUNTER_TIERS[0][0]
    return now - now % width


def worker_doc(info: WorkerInfo) -> str:
    """A registry row as stored."""
    return json.dumps(
        {
            "id": info.id,
            "host": info.host,
            "pid": info.pid,
            "started": info.started_at_ms,
            "queues": list(info.queues),
            "slots": info.slots,
            "in_flight": list(info.in_flight),
            "heartbeat": info.heartbeat_at_ms,
        },
        separators=(",", ":"),
    )


class RedisDriver(BaseDriver):
    """The whole driver protocol over Redis, with the operator's store, fleet leases, rate schedules, the
    scheduler's leader and watermarks, and the backfill ledger.

    ``client`` is a redis-py client (:meth:`from_url` builds one for a URL; ``ULTIMATE_JOBS["DRIVER"] =
    "redis"`` builds the driver for ``ULTIMATE_JOBS["REDIS_URL"]`` — the driver reads no settings); ``prefix``
    names the store (its keys are ``{prefix}:…``); ``done_ttl_ms`` is how long a done row and its steps
    are kept (``0`` keeps them), measured on ``clock``; ``fair_queues`` names the queues whose claims serve
    their orgs in turn (``driver.fair_queues``, read on every claim).
    """

    name = "redis"
    supports_wake = True
    supports_listen = True

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "x",
        clock: Clock | None = None,
        done_ttl_ms: int = DONE_TTL_MS,
        visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS,
        fair_queues: Iterable[str] = (),
    ) -> None:
        if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}"):
            raise InvariantError(
                f"RedisDriver prefix {prefix!r} must be non-empty text without braces (it becomes the hash tag)",
                {"prefix": prefix},
            )
        if isinstance(done_ttl_ms, bool) or not isinstance(done_ttl_ms, int) or done_ttl_ms < 0:
            raise InvariantError(
                f"RedisDriver done_ttl_ms must be an int >= 0 (0 keeps done rows), got {done_ttl_ms!r}",
                {"done_ttl_ms": done_ttl_ms},
            )
        self.client = client
        self.prefix = prefix
        self.tag = "{" + prefix + "}"
        self.clock = clock or system_clock()
        self.done_ttl_ms = done_ttl_ms
        self.visibility_timeout_ms = visibility_timeout_ms
        self.fair_queues: frozenset[str] = frozenset(fair_queues)
        self._scripts: dict[str, Script] = {
            name: self.client.register_script(source) for name, source in SCRIPTS.items()
        }
        self._operator = RedisOperatorStore(self)
        self._leases = RedisLeaseStore(self)
        self._rates = RedisRateStore(self)
        self._leader = RedisLeaderStore(self)
        self._scheduler_state = RedisSchedulerStore(self)
        self._backfills = RedisBackfillStore(self)
        self._wakes: WakeHub[RedisWake] = WakeHub(self._start_wake)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisDriver:
        """A driver over a client for ``url`` (``redis://``, ``rediss://`` or ``unix://``)."""
        return cls(client_from_url(url), **options)

    # -- capabilities --------------------------------------------------------------------------

    @property
    def operator(self) -> RedisOperatorStore:
        return self._operator

    @property
    def leases(self) -> RedisLeaseStore:
        return self._leases

    @property
    def rates(self) -> RedisRateStore:
        return self._rates

    @property
    def leader(self) -> RedisLeaderStore:
        return self._leader

    @property
    def scheduler_state(self) -> RedisSchedulerStore:
        return self._scheduler_state

    @property
    def backfills(self) -> RedisBackfillStore:
        return self._backfills

    # -- plumbing ------------------------------------------------------------------------------

    def key(self, *parts: str) -> str:
        """A key of this store: ``{prefix}:part:part``."""
        return ":".join((self.tag, *parts))

    def run(self, script: str, *args: Any) -> Any:
        """Run one script by SHA (loading it on a server that lost its cache); a Redis failure is
        ``X_DRIVER_UNAVAILABLE`` naming the server."""
        with self.unavailable():
            return text(self._scripts[script](keys=[self.tag], args=list(args)))

    @contextmanager
    def unavailable(self) -> Iterator[None]:
        """Turn a redis-py error into ``X_DRIVER_UNAVAILABLE``, saying what to check."""
        try:
            yield
        except redis.RedisError as exc:
            raise DriverUnavailableError(
                f"Redis did not answer the jobs driver ({type(exc).__name__}: {exc}); check that the server "
                "ULTIMATE_JOBS['REDIS_URL'] names is up and reachable",
                {"driver": "redis"},
            ) from exc

    # -- the wake ------------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Hear the queues other processes announce (a blocking ``XREAD`` on the wake stream, on a
        connection of its own). The reader starts with the first subscriber and stops with the last."""
        return self._wakes.subscribe(listener)

    def _start_wake(self, tell: Callable[[str], None]) -> RedisWake:
        wake = RedisWake(self, tell)
        wake.start()
        return wake

    def wake_is_live(self) -> bool:
        """Whether the wake reader is connected (the worker then raises its idle ceiling to 5 s)."""
        return self._wakes.is_live()

    # -- enqueue -------------------------------------------------------------------------------

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        return self.enqueue_many([request])[0]

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        if not requests:
            return []
        docs = [request_doc(r) for r in requests]
        status, body = self.run("enqueue", str(self.clock.now_ms()), json.dumps(docs, separators=(",", ":")))
        if status == "refused" and body[0] == "id-taken":
            raise id_taken(requests[[doc["id"] for doc in docs].index(body[2])])
        if status == "refused":
            _, name, key, holder = body
            raise JobDuplicateError(
                f"{name}: idempotency key {key!r} is held by live job {holder}; "
                "enqueue with on_conflict='dedupe' to answer that job instead",
                {"job": name, "key": key, "holder": holder},
            )
        return [Enqueued(job_id, run_id, bool(int(deduped))) for job_id, run_id, deduped in body]

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
        now = self.clock.now_ms()
        limit = max(limit, 0)
        fair = self.fair_queues
        caps = [
            [q, limit if queue_limits is None else max(0, min(limit, queue_limits.get(q, limit))), q in fair]
            for q in sorted(set(queues))
        ]
        spec = {
            "queues": caps,
            "drop": sorted(drop_exhausted),
            "token": uuid.uuid4().hex[:24],
            "bucket": str(bucket_of(now)),
            "done_ttl": str(self.done_ttl_ms),
            "record": None if record is None else [record.id, worker_doc(record)],
        }
        claimed, exhausted = json.loads(
            self.run("claim", str(now), str(limit), worker_id, str(now + window_ms), json.dumps(spec))
        )
        buried = [exhausted_job(row) for row in exhausted or ()]  # an empty list comes back as {}
        return Claim(jobs=[claimed_job(row, steps) for row, steps in claimed or ()], buried=buried)

    # -- settles -------------------------------------------------------------------------------

    def _unowned(self, job_id: str, ref: ClaimRef, op: str) -> None:
        log_event(logging.WARNING, "jobs.settle.unowned", job_id=job_id, op=op, worker_id=ref.worker_id)

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        if not acks:
            return frozenset()
        now = self.clock.now_ms()
        args: list[str] = [str(now), str(bucket_of(now)), str(self.done_ttl_ms)]
        for a in acks:
            bin_ = "" if a.wait_ms is None else str(wait_bin(a.wait_ms))
            args += [a.job_id, a.ref.worker_id, a.ref.claim, str(a.duration_ms or 0), bin_]
        missed = frozenset(self.run("ack", *args))  # the places in ``acks`` that did not land
        for place in missed:
            self._unowned(acks[place].job_id, acks[place].ref, "ack")
        return frozenset(a.job_id for place, a in enumerate(acks) if place not in missed)

    def nack(self, job_id: str, ref: ClaimRef, options: NackOptions) -> bool:
        now = self.clock.now_ms()
        doc = {
            "target": nack_state(options),
            "count_attempt": options.count_attempt,
            "run_at": None if options.run_at_ms is None else str(options.run_at_ms),
            "error": options.error,
            "code": options.code,
            "counter": nack_counter(options),
            "duration": str(options.duration_ms or 0),
            "wait_bin": None if options.wait_ms is None else str(wait_bin(options.wait_ms)),
            "bucket": str(bucket_of(now)),
        }
        landed = bool(self.run("nack", str(now), job_id, ref.worker_id, ref.claim, json.dumps(doc)))
        if not landed:
            self._unowned(job_id, ref, "nack")
        return landed

    def heartbeat(self, beats: Sequence[Heartbeat], *, visibility_timeout_ms: int) -> frozenset[str]:
        if not beats:
            return frozenset()
        args: list[str] = [str(self.clock.now_ms() + visibility_timeout_ms)]
        for beat in beats:
            args += [beat.job_id, beat.ref.worker_id, beat.ref.claim]
        return frozenset(self.run("heartbeat", *args))

    def save_step(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        landed = bool(self.run("save_step", job_id, ref.worker_id, ref.claim, step.name, step_json(step)))
        if not landed:
            self._unowned(job_id, ref, "save_step")
        return landed

    def save_step_held(self, job_id: str, ref: ClaimRef, step: StepRecord) -> bool:
        """No transaction of Django's reaches this driver's rows: ``X_STEP_ATOMIC_UNSUPPORTED``."""
        raise StepAtomicUnsupportedError.outside_django(self.name, step.name)

    def record_progress(self, job_id: str, ref: ClaimRef, progress: Progress) -> bool:
        landed = bool(self.run("record_progress", job_id, ref.worker_id, ref.claim, progress_json(progress)))
        if not landed:
            self._unowned(job_id, ref, "record_progress")
        return landed

    # -- the worker registry and the counters --------------------------------------------------

    def record_worker(self, info: WorkerInfo) -> None:
        trimmed = replace(info, in_flight=tuple(info.in_flight[:MAX_WORKER_IN_FLIGHT]))
        call(self, lambda: self.client.hset(self.key("workers"), info.id, worker_doc(trimmed)))

    def remove_worker(self, worker_id: str) -> None:
        call(self, lambda: self.client.hdel(self.key("workers"), worker_id))

    def rollup_counters(self) -> int:
        now = self.clock.now_ms()
        folded = int(self.run("rollup", str(now)))
        self.sample_queues(now)
        return folded

    def sample_queues(self, now_ms: int) -> None:
        """The queues' depth sample the rollup takes (``x_job_queue_samples``): one stats read and one script,
        after the rollup — the SQL drivers take it inside the rollup's statement or transaction."""
        samples = [[s.bucket_ms, s.queue, s.depth, s.oldest_age_ms] for s in queue_samples_of(self.stats(), now_ms)]
        self.run("sample_queues", str(now_ms - SAMPLE_KEEP_MS), json.dumps(samples))

    # -- retention and stats -------------------------------------------------------------------

    def stats(self) -> list[QueueStats]:
        rows = self.run("stats", str(self.clock.now_ms()))
        return [
            QueueStats(
                queue=q,
                ready=int(ready),
                delayed=int(delayed),
                running=int(running),
                suspended=int(suspended),
                dead=int(dead),
                oldest_ready_ms=int(float(oldest)) if oldest else None,
                paused=bool(int(paused)),
            )
            for q, ready, delayed, running, suspended, dead, oldest, paused in rows
        ]

    def purge_finished(self, *, before_ms: Mapping[JobState, int], limit: int = PURGE_BATCH) -> int:
        cutoffs = finished_cutoffs(before_ms, limit)
        doc = {state: str(instant) for state, instant in cutoffs.items()}
        return int(self.run("purge", str(limit), json.dumps(doc) if doc else "{}"))

    def close(self) -> None:
        """Stop the wake reader. Idempotent; the client and its connection pool stay usable."""
        self._wakes.close()


def call(driver: RedisDriver, fn: Callable[[], R]) -> R:
    """Run a plain redis-py call under the driver's error translation."""
    with driver.unavailable():
        return fn()
