"""One random script of operations, run on the Redis driver and on the memory driver at once, every
answer compared: enqueues with colliding keys, claims, acks, nacks, heartbeats on stale claims,
cancels, requeues and clock jumps. Ids differ between the drivers (each allocates its own), so the
test maps each Redis id to the memory id the same enqueue answered and compares through that map.
Rate takes and forgets, which hold no ids, are compared answer for answer in a test of their own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.redis_db import redis_test_url
from ultimate_jobs.contracts.jobs import ClaimedJob, EnqueueRequest, ExhaustedJob, Heartbeat, NackOptions
from ultimate_jobs.contracts.operator import JobFilter, JobRecord
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.memory.stores import MemoryRateStore
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.drivers.redis.driver import client_from_url
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import FrozenClock

QUEUES = ("a", "b")
KEYS = ("k1", "k2", "k3", "k4")
NAMES = ("job.one", "job.two")
VT = 5_000

nacks = st.sampled_from(
    [
        NackOptions(error="retry"),
        NackOptions(error="backoff", run_at_ms=-1),  # -1: a second after now, filled in by the rule
        NackOptions(error="dead", dead_letter=True),
        NackOptions(error="fail", fail=True, code="X_E"),
        NackOptions(park=True, run_at_ms=-1, count_attempt=False),
        NackOptions(count_attempt=False),
    ]
)


class DriversAgree(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FrozenClock()
        self.client = client_from_url(redis_test_url())
        self.client.flushdb()
        self.memory = MemoryDriver(clock=self.clock)
        self.redis = RedisDriver(self.client, clock=self.clock, done_ttl_ms=0)
        self.ids: dict[str, str] = {}  # redis id -> memory id
        self.jobs: list[tuple[str, str]] = []  # (memory id, redis id), in enqueue order
        self.claims: list[tuple[ClaimedJob, ClaimedJob]] = []  # every claim ever handed out, stale ones kept

    def teardown(self) -> None:
        self.client.close()

    # -- mapping ---------------------------------------------------------------------------------

    def _job(self, job: ClaimedJob) -> ClaimedJob:
        return replace(job, id=self.ids[job.id], run_id="", claim="", lease_until_ms=job.lease_until_ms)

    def _exhausted(self, job: ExhaustedJob) -> ExhaustedJob:
        return replace(job, id=self.ids[job.id], run_id="")

    def _record(self, record: JobRecord, mapped: bool) -> JobRecord:
        return replace(record, id=self.ids[record.id] if mapped else record.id, run_id="")

    # -- rules -----------------------------------------------------------------------------------

    @rule(
        batch=st.lists(
            st.tuples(
                st.sampled_from(NAMES),
                st.sampled_from(KEYS),
                st.sampled_from(QUEUES),
                st.integers(-1, 1),
                st.sampled_from([None, 0, 2_000]),
                st.integers(1, 3),
                st.sampled_from([None, "t1"]),
            ),
            min_size=1,
            max_size=3,
        ),
        on_conflict=st.sampled_from(["dedupe", "error"]),
    )
    def enqueue(self, batch: list[tuple[Any, ...]], on_conflict: Any) -> None:
        now = self.clock.now_ms()
        requests = [
            EnqueueRequest(
                name=name,
                queue=queue,
                input={"key": key},
                idempotency_key=key,
                tenant_id=tenant,
                max_attempts=attempts,
                priority=priority,
                run_at_ms=None if delay is None else now + delay,
                on_conflict=on_conflict,
            )
            for name, key, queue, priority, delay, attempts, tenant in batch
        ]
        outcomes = []
        for driver in (self.memory, self.redis):
            try:
                outcomes.append(("ok", driver.enqueue_many(requests)))
            except UltimateError as exc:
                outcomes.append(("error", exc.code))
        (mem_kind, mem), (red_kind, red) = outcomes
        assert mem_kind == red_kind, outcomes
        if mem_kind == "error":
            assert mem == red
            return
        for m, r in zip(mem, red, strict=True):
            assert m.deduped == r.deduped, (m, r)
            if m.deduped:
                assert self.ids[r.id] == m.id
            elif r.id not in self.ids:
                self.ids[r.id] = m.id
                self.jobs.append((m.id, r.id))

    @rule(
        queues=st.sampled_from([("a",), ("b",), ("a", "b")]),
        limit=st.integers(0, 3),
        worker=st.sampled_from(["w1", "w2"]),
        cap=st.sampled_from([None, 1]),
    )
    def claim(self, queues: tuple[str, ...], limit: int, worker: str, cap: int | None) -> None:
        got = [
            driver.claim(
                queues=list(queues),
                limit=limit,
                worker_id=worker,
                visibility_timeout_ms=VT,
                drop_exhausted=frozenset({"job.two"}),
                queue_limits=None if cap is None else {"a": cap},
            )
            for driver in (self.memory, self.redis)
        ]
        mem, red = got[0].jobs, got[1].jobs
        assert [replace(j, run_id="", claim="") for j in mem] == [self._job(j) for j in red]
        assert [replace(j, run_id="") for j in got[0].buried] == [self._exhausted(j) for j in got[1].buried]
        self.claims += list(zip(mem, red, strict=True))

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(0, 1_000), duration=st.integers(0, 50))
    def ack(self, pick: int, duration: int) -> None:
        m, r = self.claims[pick % len(self.claims)]
        assert self.memory.ack(m.id, m.ref, duration_ms=duration) == self.redis.ack(r.id, r.ref, duration_ms=duration)

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(0, 1_000), options=nacks)
    def nack(self, pick: int, options: NackOptions) -> None:
        m, r = self.claims[pick % len(self.claims)]
        if options.run_at_ms == -1:
            options = replace(options, run_at_ms=self.clock.now_ms() + 1_000)
        assert self.memory.nack(m.id, m.ref, options) == self.redis.nack(r.id, r.ref, options)

    @precondition(lambda self: self.claims)
    @rule(picks=st.lists(st.integers(0, 1_000), min_size=1, max_size=3))
    def heartbeat(self, picks: list[int]) -> None:
        chosen = [self.claims[p % len(self.claims)] for p in picks]
        mem = self.memory.heartbeat([Heartbeat(m.id, m.ref) for m, _ in chosen], visibility_timeout_ms=VT)
        red = self.redis.heartbeat([Heartbeat(r.id, r.ref) for _, r in chosen], visibility_timeout_ms=VT)
        assert mem == {self.ids[i] for i in red}

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, 1_000))
    def cancel(self, pick: int) -> None:
        m, r = self.jobs[pick % len(self.jobs)]
        mem, red = self.memory.operator.cancel(m, "why"), self.redis.operator.cancel(r, "why")
        assert (mem is None) == (red is None)
        if mem is not None and red is not None:
            assert replace(mem, run_id="") == self._record(red, True)

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, 1_000))
    def requeue(self, pick: int) -> None:
        m, r = self.jobs[pick % len(self.jobs)]
        outcomes = []
        for driver, job_id in ((self.memory, m), (self.redis, r)):
            try:
                outcomes.append(("ok", driver.operator.requeue(job_id)))
            except UltimateError as exc:
                outcomes.append(("error", exc.code))
        (mk, mem), (rk, red) = outcomes
        assert mk == rk and ((mk == "error" and mem == red) or mk == "ok"), outcomes
        if mk == "ok":
            assert replace(mem, run_id="") == self._record(red, True)

    @rule(ms=st.sampled_from([1, 999, 1_000, 2_000, VT, VT + 1]))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    # -- after every step --------------------------------------------------------------------------

    @invariant()
    def every_row_and_count_agree(self) -> None:
        assert self.memory.stats() == self.redis.stats()
        mem = self.memory.operator.list(JobFilter(limit=200)).rows
        red = self.redis.operator.list(JobFilter(limit=200)).rows
        assert sorted((replace(r, run_id="") for r in mem), key=lambda r: r.id) == sorted(
            (self._record(r, True) for r in red), key=lambda r: r.id
        )
        since = self.clock.now_ms() - 86_400_000
        assert self.memory.operator.counter_totals(since) == self.redis.operator.counter_totals(since)


DriversAgree.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDriversAgree = pytest.mark.slow(pytest.mark.redis(DriversAgree.TestCase))


RATE_INTERVALS = {"api": 100, "api:org-a": 50, "api\x1fodd": 250}  # a key may hold the separator itself

rate_steps = st.lists(
    st.tuples(
        st.sampled_from(["take", "take", "take", "forget"]),
        st.sampled_from(sorted(RATE_INTERVALS)),
        st.sampled_from(["job-1", "job-2", "job-3"]),
        # how the clock moves first: on by some ms, or to the holder's last answer ("due"), or to one
        # interval past it ("late", the first instant its reservation is stale)
        st.sampled_from([0, 1, 50, 99, 100, 250, "due", "late"]),
    ),
    max_size=60,
)


@given(rate_steps)
@settings(max_examples=200, deadline=None)
def test_rate_takes_forgets_and_state_agree_with_the_memory_store(steps: list[tuple[str, str, str, int | str]]) -> None:
    client = client_from_url(redis_test_url())
    client.flushdb()
    redis_rates, memory_rates = RedisDriver(client).rates, MemoryRateStore()
    now = 1_000_000
    due: dict[tuple[str, str], int] = {}  # the instant each holder's last take answered
    try:
        for op, key, holder, move in steps:
            interval = RATE_INTERVALS[key]
            if isinstance(move, int):
                now += move
            else:
                now = max(now, due.get((key, holder), now) + (interval if move == "late" else 0))
            if op == "take":
                answers = [s.take(key, holder, interval_ms=interval, now_ms=now) for s in (memory_rates, redis_rates)]
                due[(key, holder)] = now + answers[0]
            else:  # forget what is older than the key's interval
                answers = [s.forget(before_ms=now - interval) for s in (memory_rates, redis_rates)]
            assert answers[0] == answers[1], (op, key, holder, now)
            assert memory_rates.state() == redis_rates.state()
    finally:
        client.close()
