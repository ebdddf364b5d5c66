"""The operator half of the conformance suite: ``driver.operator`` and the counters the settles move.

A mixin of :class:`~ultimate_jobs.testing.conformance.DriverConformance`. Every test here asks for
the ``operator_store`` fixture, which skips (with its reason) only on a driver whose ``operator`` is
``None``. The driver's own writes that only the operator's reads can see — ``record_worker``,
``remove_worker``, ``record_progress``, ``rollup_counters`` — are checked here too, through those reads.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from ..contracts.jobs import LEASE_LAPSED_FINAL_ATTEMPT, Ack, Heartbeat, NackOptions, Progress, StepRecord
from ..contracts.operator import (
    DEFAULT_JOB_PAGE,
    MAX_BULK_ROWS,
    MAX_JOB_PAGE,
    MAX_WORKER_IN_FLIGHT,
    BulkFilter,
    BulkResult,
    JobFilter,
    WorkerInfo,
)
from ..contracts.ordering import job_cursor
from ..contracts.protocol import JobDriver, OperatorStore
from ..contracts.series import (
    COUNTER_TIERS,
    SAMPLE_KEEP_MS,
    WAIT_BINS,
    CounterBucket,
    CounterTotals,
    QueueSample,
    WaitBucket,
    wait_bin,
)
from ..core.ids import short_id
from .clock import FrozenClock
from .conformance_support import (
    JOB,
    QUEUE,
    VT,
    StateWriter,
    claim,
    claim_one,
    claimed_ids,
    enqueue_finished,
    finish,
    fixed_id,
    minted_id,
    new_id,
    one_millisecond,
    raises_code,
    record,
    request,
    requests,
    settle_done,
)

MINUTE = COUNTER_TIERS[0][0]
FIVE_MINUTES = COUNTER_TIERS[1][0]


def _step(name: str, seq: int, at_ms: int) -> StepRecord:
    return StepRecord(
        name=name, seq=seq, status="done", output={"step": name}, started_at_ms=at_ms, finished_at_ms=at_ms
    )


def _worker(worker_id: str, at_ms: int, in_flight: tuple[str, ...] = ()) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        host="host-1",
        pid=4242,
        started_at_ms=at_ms,
        queues=(QUEUE, "conformance-b"),
        slots=8,
        in_flight=in_flight,
        heartbeat_at_ms=at_ms,
    )


class OperatorContract:
    """``OperatorStore``: reads, single-row and bulk operations, pauses, workers, counters, fires."""

    # -- a row this version cannot read ----------------------------------------------------------

    def test_a_row_in_a_state_this_version_does_not_know_is_refused_where_it_is_read(
        self, driver: JobDriver, operator_store: OperatorStore, write_state: StateWriter
    ) -> None:
        known, unknown = (driver.enqueue(r) for r in requests(2))
        write_state(driver, unknown.id, "archived")  # as a newer version (or a hand edit) would store it
        with raises_code("X_JOB_ROW_STATUS_UNKNOWN") as info:
            operator_store.get(unknown.id)
        assert (info.value.meta["job_id"], info.value.meta["state"]) == (unknown.id, "archived")
        with raises_code("X_JOB_ROW_STATUS_UNKNOWN"):  # a page holding it is refused, not shown without it
            operator_store.list(JobFilter())
        record = operator_store.get(known.id)
        assert record is not None and record.state == "ready"  # the rows this version knows read as before

    # -- nack targets and counters -------------------------------------------------------------

    @pytest.mark.parametrize(
        ("flags", "state", "delay_ms"),
        [
            ({"dead_letter": True}, "dead", None),
            ({"fail": True}, "failed", None),
            ({"park": True, "count_attempt": False}, "suspended", 60_000),
            ({}, "ready", 30_000),
        ],
        ids=["dead_letter-dead", "fail-failed", "park-suspended", "default-ready"],
    )
    def test_nack_target_follows_nack_options(
        self,
        driver: JobDriver,
        operator_store: OperatorStore,
        clock: FrozenClock,
        flags: dict[str, Any],
        state: str,
        delay_ms: int | None,
    ) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        run_at = None if delay_ms is None else clock.now_ms() + delay_ms
        options = NackOptions(error="it broke", code="X_CONFORMANCE", run_at_ms=run_at, **flags)
        assert driver.nack(job.id, job.ref, options)
        row = record(operator_store, job.id)
        assert (row.state, row.last_error, row.last_code) == (state, "it broke", "X_CONFORMANCE")
        if run_at is not None:
            assert row.run_at_ms == run_at

    def test_counters_move_in_the_settle(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        name = "conformance.counted"
        later = clock.now_ms() + 60_000
        nacks = {
            "retry": NackOptions(error="e", run_at_ms=later, duration_ms=5),
            "dead": NackOptions(error="e", dead_letter=True, duration_ms=7),
            "fail": NackOptions(error="e", fail=True),
            "refuse": NackOptions(error="busy", code="X_JOB_KEY_BUSY", fail=True, count_attempt=False),
            "hand-back": NackOptions(count_attempt=False, run_at_ms=later),
            "park": NackOptions(park=True, count_attempt=False, run_at_ms=later),
        }
        driver.enqueue_many([request(name, key=key) for key in ["ack", *nacks]])
        jobs = {job.idempotency_key: job for job in claim(driver)}
        acked = jobs["ack"]
        assert driver.ack(acked.id, acked.ref, duration_ms=100)
        assert driver.ack(acked.id, acked.ref, duration_ms=100) is False  # a settle that did not land counts nothing
        for key, options in nacks.items():
            assert driver.nack(jobs[key].id, jobs[key].ref, options)
        since = clock.now_ms() - MINUTE
        totals = {t.job: t for t in operator_store.counter_totals(since)}
        assert totals[name] == CounterTotals(name, done=1, retried=1, failed=2, dead=1, duration_ms=112)
        [bucket] = operator_store.counters(job=name, since_ms=since)
        assert (bucket.bucket_ms, bucket.width_ms) == (clock.now_ms() - clock.now_ms() % MINUTE, MINUTE)
        assert (bucket.done, bucket.retried, bucket.failed, bucket.dead, bucket.duration_ms) == (1, 1, 2, 1, 112)

    def test_the_counter_series_sums_every_jobs_buckets_per_bucket(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        first = clock.set(clock.now_ms() + (-clock.now_ms() % (2 * MINUTE)))  # two minutes, one wider bucket
        since = clock.now_ms()
        assert operator_store.counter_series(since, MINUTE) == []
        driver.enqueue_many([request("conformance.series_a", key="a1"), request("conformance.series_b", key="b1")])
        a1, b1 = sorted(claim(driver), key=lambda job: job.name)
        assert driver.ack(a1.id, a1.ref, duration_ms=10)
        assert driver.nack(b1.id, b1.ref, NackOptions(error="e", dead_letter=True, duration_ms=30))
        clock.advance(MINUTE)
        driver.enqueue(request("conformance.series_a", key="a2"))
        a2 = claim_one(driver)
        assert driver.nack(a2.id, a2.ref, NackOptions(error="e", run_at_ms=clock.now_ms() + MINUTE, duration_ms=4))
        series = operator_store.counter_series(since, MINUTE)
        assert series == [  # both jobs' settles, summed, and their run times' bins (10 and 30 ms: 10-50 ms)
            CounterBucket("", first, MINUTE, done=1, dead=1, duration_ms=40, run_bins=run_bins({1: 2})),
            CounterBucket("", first + MINUTE, MINUTE, retried=1, duration_ms=4, run_bins=run_bins({0: 1})),
        ]
        assert operator_store.counter_series(first + MINUTE, MINUTE) == series[1:]  # buckets ending after it
        assert operator_store.counter_series(since, 2 * MINUTE) == [  # summed into a wider bucket
            CounterBucket(
                "", first, 2 * MINUTE, done=1, retried=1, dead=1, duration_ms=44, run_bins=run_bins({0: 1, 1: 2})
            )
        ]
        [bucket] = operator_store.counters(job="conformance.series_b", since_ms=since)  # one job's, with its bins
        assert (bucket.dead, bucket.run_bins) == (1, run_bins({1: 1}))

    def test_uncounted_nacks_move_no_counter(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        name = "conformance.uncounted"
        driver.enqueue(request(name))
        job = claim_one(driver)
        assert driver.nack(job.id, job.ref, NackOptions(count_attempt=False))
        job = claim_one(driver)
        assert driver.nack(job.id, job.ref, NackOptions(park=True, count_attempt=False, run_at_ms=clock.now_ms() + 1))
        assert name not in {t.job for t in operator_store.counter_totals(0)}
        assert operator_store.counters(job=name, since_ms=0) == []

    def test_buried_final_attempt_is_recorded_and_counted(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        dead_id = driver.enqueue(request("conformance.buried", max_attempts=1)).id
        failed_id = driver.enqueue(request("conformance.dropped", max_attempts=1)).id
        assert len(claim(driver)) == 2
        clock.advance(VT)
        drop = frozenset({"conformance.dropped"})
        assert list(driver.claim(queues=[QUEUE], limit=5, worker_id="w2", drop_exhausted=drop).jobs) == []
        dead, failed = record(operator_store, dead_id), record(operator_store, failed_id)
        assert (dead.state, dead.last_error, dead.attempts) == ("dead", LEASE_LAPSED_FINAL_ATTEMPT, 1)
        assert (failed.state, failed.last_error) == ("failed", LEASE_LAPSED_FINAL_ATTEMPT)
        totals = {t.job: t for t in operator_store.counter_totals(0)}
        assert (totals["conformance.buried"].dead, totals["conformance.buried"].failed) == (1, 0)
        assert (totals["conformance.dropped"].dead, totals["conformance.dropped"].failed) == (0, 1)

    def test_rollup_folds_day_old_minute_buckets(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        name = "conformance.rolled"
        start = clock.set(clock.now_ms() + (-clock.now_ms() % FIVE_MINUTES))
        settle_done(driver, name, duration_ms=10)
        clock.advance(MINUTE)
        settle_done(driver, name, duration_ms=20)
        recent = clock.advance(COUNTER_TIERS[0][1] + FIVE_MINUTES)
        settle_done(driver, name, duration_ms=40)
        assert driver.rollup_counters() > 0
        folded = [
            (b.bucket_ms, b.width_ms, b.done, b.duration_ms) for b in operator_store.counters(job=name, since_ms=0)
        ]
        assert folded == [(start, FIVE_MINUTES, 2, 30), (recent, MINUTE, 1, 40)]
        bins = [b.run_bins for b in operator_store.counters(job=name, since_ms=0)]
        assert bins == [run_bins({1: 2}), run_bins({1: 1})]  # the run-time bins fold with the counts (10-50 ms)
        assert {t.job: t.done for t in operator_store.counter_totals(0)}[name] == 3

    def test_waits_move_in_the_settle_by_queue_and_bin(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        minute = clock.now_ms() - clock.now_ms() % MINUTE
        since = clock.now_ms()
        assert operator_store.wait_series(since, MINUTE) == []
        driver.enqueue_many([request(key=k) for k in ("fast", "slow", "untimed", "handed")])
        driver.enqueue(request(key="other", queue="conformance-other"))
        jobs = {job.idempotency_key: job for job in claim(driver, queues=[QUEUE, "conformance-other"])}
        assert driver.ack_many(
            [
                Ack(jobs["fast"].id, jobs["fast"].ref, 3, wait_ms=5),  # bin 0: under 10 ms
                Ack(jobs["untimed"].id, jobs["untimed"].ref, 3),  # no wait given: none counted
                Ack(jobs["other"].id, jobs["other"].ref, 3, wait_ms=120_000),  # bin 11: 60 s to 5 min
            ]
        ) == {jobs["fast"].id, jobs["untimed"].id, jobs["other"].id}
        retry = NackOptions(error="e", run_at_ms=clock.now_ms() + MINUTE, duration_ms=2, wait_ms=700)
        assert driver.nack(jobs["slow"].id, jobs["slow"].ref, retry)  # counted: bin 5, 500 ms to 1 s
        handed = NackOptions(count_attempt=False, run_at_ms=clock.now_ms() + MINUTE, wait_ms=700)
        assert driver.nack(jobs["handed"].id, jobs["handed"].ref, handed)  # an uncounted hand-back: no wait
        bins = [0] * WAIT_BINS
        bins[0] = bins[5] = 1
        other = [0] * WAIT_BINS
        other[11] = 1
        assert sorted(operator_store.wait_series(since, MINUTE), key=lambda b: b.queue) == sorted(
            [
                WaitBucket(QUEUE, minute, MINUTE, tuple(bins)),
                WaitBucket("conformance-other", minute, MINUTE, tuple(other)),
            ],
            key=lambda b: b.queue,
        )
        assert wait_bin(5) == 0 and wait_bin(700) == 5 and wait_bin(120_000) == 11 and wait_bin(-3) == 0

    def test_rollup_folds_day_old_wait_bins_with_the_counters(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        start = clock.set(clock.now_ms() + (-clock.now_ms() % FIVE_MINUTES))
        for wait_ms in (20, 30):  # one bin, two minutes of one five-minute bucket
            driver.enqueue(request(key=f"waited-{wait_ms}"))
            job = claim_one(driver)
            assert driver.ack_many([Ack(job.id, job.ref, 1, wait_ms=wait_ms)])
            clock.advance(MINUTE)
        clock.advance(COUNTER_TIERS[0][1] + FIVE_MINUTES)
        driver.rollup_counters()
        [folded] = operator_store.wait_series(0, FIVE_MINUTES)
        assert (folded.queue, folded.bucket_ms, folded.width_ms) == (QUEUE, start, FIVE_MINUTES)
        assert folded.counts[wait_bin(20)] == 2 and sum(folded.counts) == 2

    def test_the_rollup_samples_each_queues_depth_and_oldest_due_age(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        minute = clock.set(clock.now_ms() + (-clock.now_ms() % (2 * MINUTE)))  # two minutes, one wider bucket
        assert operator_store.queue_samples(minute, MINUTE) == []
        driver.enqueue_many([request(key=f"due-{n}") for n in range(3)])
        driver.enqueue(request(key="later", queue="conformance-other", run_at_ms=minute + 3_600_000))
        clock.advance(30_000)
        driver.rollup_counters()

        def sampled(width_ms: int) -> list[QueueSample]:
            return sorted(operator_store.queue_samples(minute, width_ms), key=lambda s: (s.bucket_ms, s.queue))

        assert sampled(MINUTE) == [
            QueueSample("", minute, 0, None),  # the minute was sampled
            QueueSample(QUEUE, minute, 3, 30_000),  # three waiting, the oldest due 30 s ago
            QueueSample("conformance-other", minute, 1, None),  # one waiting, none due yet
        ]
        clock.advance(10_000)
        claim(driver, limit=2)
        driver.rollup_counters()  # the same minute: the most of each is kept
        assert [(s.queue, s.depth, s.oldest_age_ms) for s in sampled(MINUTE) if s.queue == QUEUE] == [
            (QUEUE, 3, 40_000)
        ]
        clock.advance(MINUTE)
        driver.rollup_counters()
        assert [(s.bucket_ms, s.depth, s.oldest_age_ms) for s in sampled(MINUTE) if s.queue == QUEUE] == [
            (minute, 3, 40_000),
            (minute + MINUTE, 1, 100_000),  # one left waiting, due since the start
        ]
        assert [(s.queue, s.depth, s.oldest_age_ms) for s in sampled(2 * MINUTE)] == [
            ("", 0, None),
            (QUEUE, 3, 100_000),  # the wider bucket keeps the most waiting and the oldest age of its minutes
            ("conformance-other", 1, None),
        ]
        clock.advance(SAMPLE_KEEP_MS + MINUTE)
        driver.rollup_counters()  # samples older than a week go
        assert {s.bucket_ms for s in operator_store.queue_samples(0, MINUTE)} == {
            clock.now_ms() - clock.now_ms() % MINUTE
        }

    def test_rollup_is_idempotent(self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock) -> None:
        name = "conformance.rolled-twice"
        settle_done(driver, name, duration_ms=10)
        clock.advance(COUNTER_TIERS[0][1] + FIVE_MINUTES)
        driver.rollup_counters()
        once = operator_store.counters(job=name, since_ms=0)
        assert driver.rollup_counters() == 0
        assert operator_store.counters(job=name, since_ms=0) == once
        assert [(b.width_ms, b.done) for b in once] == [(FIVE_MINUTES, 1)]

    # -- reads ---------------------------------------------------------------------------------

    def test_get_answers_the_row_through_its_life(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        answer = driver.enqueue(request(key="k", tenant_id="org-1", input={"n": 5}, max_attempts=4, priority=2))
        row = record(operator_store, answer.id)
        assert (row.id, row.run_id, row.name, row.queue, row.state) == (answer.id, answer.run_id, JOB, QUEUE, "ready")
        assert (row.tenant_id, row.idempotency_key, dict(row.input)) == ("org-1", "k", {"n": 5})
        assert (row.attempts, row.max_attempts, row.priority) == (0, 4, 2)
        assert row.run_at_ms == row.created_at_ms == clock.now_ms()
        job = claim_one(driver, worker="w7")
        running = record(operator_store, answer.id)
        assert (running.state, running.attempts, running.worker_id) == ("running", 1, "w7")
        assert running.lease_until_ms == clock.now_ms() + VT
        clock.advance(5)
        assert driver.ack(job.id, job.ref)
        done = record(operator_store, answer.id)
        assert (done.state, done.finished_at_ms) == ("done", clock.now_ms())

    @pytest.mark.parametrize("ending", ["ack", "retry", "park", "dead_letter", "fail", "cancel", "buried"])
    def test_a_settled_row_keeps_the_worker_of_its_last_attempt(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock, ending: str
    ) -> None:
        job_id = driver.enqueue(request(max_attempts=1 if ending == "buried" else 3)).id
        job = claim_one(driver, worker="w7")
        later = clock.now_ms() + 1_000
        nacks = {
            "retry": NackOptions(error="e", run_at_ms=later),
            "park": NackOptions(park=True, count_attempt=False, run_at_ms=later),
            "dead_letter": NackOptions(error="e", dead_letter=True),
            "fail": NackOptions(error="e", fail=True),
        }
        if ending == "ack":
            assert driver.ack(job.id, job.ref)
        elif ending == "cancel":
            assert operator_store.cancel(job_id, "by the suite") is not None
        elif ending == "buried":
            clock.advance(VT)
            assert [b.id for b in driver.claim(queues=[QUEUE], limit=5, worker_id="w8").buried] == [job_id]
        else:
            assert driver.nack(job.id, job.ref, nacks[ending])
        row = record(operator_store, job_id)
        assert (row.worker_id, row.lease_until_ms) == ("w7", None)  # the claim and its lease are gone
        clock.advance(1_000)
        again = claim(driver, worker="w9")  # the kept worker holds nothing: any worker takes a waiting row
        if ending in ("retry", "park"):
            assert [j.id for j in again] == [job_id]
            assert record(operator_store, job_id).worker_id == "w9"
        else:
            assert again == []  # a finished row is claimed by nobody, whoever ran it last

    def test_a_requeue_clears_the_worker_with_the_attempts(
        self, driver: JobDriver, operator_store: OperatorStore
    ) -> None:
        job_id = enqueue_finished(driver, request(), "dead")
        assert record(operator_store, job_id).worker_id == "w1"
        operator_store.requeue(job_id)
        row = record(operator_store, job_id)
        assert (row.state, row.attempts, row.worker_id) == ("ready", 0, None)
        bulk = enqueue_finished(driver, request(queue="conformance-b"), "dead")
        assert operator_store.requeue_many(BulkFilter(state="dead", queue="conformance-b")).affected == 1
        assert record(operator_store, bulk).worker_id is None

    def test_get_answers_delayed_and_unknown(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        job_id = driver.enqueue(request(run_at_ms=clock.now_ms() + 1_000)).id
        row = record(operator_store, job_id)
        assert (row.state, row.run_at_ms) == ("delayed", clock.now_ms() + 1_000)
        assert operator_store.get(new_id()) is None

    def test_steps_answer_in_seq_order(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        for name, seq in (("b", 2), ("a", 1)):
            assert driver.save_step(job.id, job.ref, _step(name, seq, clock.now_ms()))
        assert [(s.name, s.seq, s.output) for s in operator_store.steps(job.id)] == [
            ("a", 1, {"step": "a"}),
            ("b", 2, {"step": "b"}),
        ]
        assert operator_store.steps(new_id()) == []

    # -- list ----------------------------------------------------------------------------------

    def test_list_is_newest_first(self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock) -> None:
        ids = []
        for _ in range(4):
            ids.append(driver.enqueue(request()).id)
            clock.advance(1)
        page = operator_store.list(JobFilter())
        assert [r.id for r in page.rows] == ids[::-1]
        assert page.limit == DEFAULT_JOB_PAGE and page.is_last

    def test_list_default_page_is_bounded(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        driver.enqueue_many(requests(DEFAULT_JOB_PAGE + 1))
        page = operator_store.list(JobFilter())
        assert len(page.rows) == DEFAULT_JOB_PAGE and not page.is_last

    def test_list_filters(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        c = enqueue_finished(driver, request("conformance.c", queue="conformance-q1", id=fixed_id("aaaaaaaa", 3)))
        a = driver.enqueue(
            request("conformance.a", queue="conformance-q1", tenant_id="org-1", id=fixed_id("aaaaaaaa", 1))
        ).id
        b = driver.enqueue(
            request("conformance.a", queue="conformance-q2", tenant_id="org-2", id=fixed_id("bbbbbbbb", 2))
        ).id

        def ids(**fields: Any) -> set[str]:
            return {r.id for r in operator_store.list(JobFilter(**fields)).rows}

        assert ids() == {a, b, c}
        assert ids(queue="conformance-q1") == {a, c}
        assert ids(name="conformance.a") == {a, b}
        assert ids(state="done") == {c}
        assert ids(state="ready", queue="conformance-q1") == {a}
        assert ids(tenant_id="org-2") == {b}
        assert ids(id_prefix="aaaaaaaa") == {a, c}
        assert ids(id_prefix=b[:13]) == {b}
        assert ids(id_suffix=short_id(a)) == {a}
        assert ids(id_suffix=b[-17:]) == {b}  # dashed where the id is: "8000-000000000002"
        assert ids(id_suffix="800000000000002") == set()  # no id ends so: the dash is missing
        assert ids(id_suffix="0000000003", queue="conformance-q1") == {c}
        assert ids(queue="conformance-none") == set()

    def test_a_short_id_names_one_job_of_a_burst_enqueued_in_one_millisecond(
        self, driver: JobDriver, operator_store: OperatorStore
    ) -> None:
        with one_millisecond():
            burst = [minted_id() for _ in range(50)]
        driver.enqueue_many([request(id=job_id) for job_id in burst])
        assert len({job_id[:15] for job_id in burst}) == 1  # the start is the millisecond: all share it
        assert len(operator_store.list(JobFilter(id_prefix=burst[0][:8])).rows) == 50
        for job_id in burst:
            assert [r.id for r in operator_store.list(JobFilter(id_suffix=short_id(job_id))).rows] == [job_id]

    def test_list_idempotency_key_is_exact(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        finished = enqueue_finished(driver, request(key="order:7"))
        live = driver.enqueue(request(key="order:7")).id  # the finished row freed the key
        other = driver.enqueue(request(key="order:70", tenant_id="org-1")).id

        def ids(**fields: Any) -> set[str]:
            return {r.id for r in operator_store.list(JobFilter(**fields)).rows}

        assert ids(idempotency_key="order:7") == {finished, live}
        assert ids(idempotency_key="order:7", state="ready") == {live}
        assert ids(idempotency_key="order:70", tenant_id="org-1") == {other}
        assert ids(idempotency_key="order") == set()

    def test_list_created_range_is_half_open(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        t0 = clock.now_ms()
        ids = []
        for _ in range(3):
            ids.append(driver.enqueue(request()).id)
            clock.advance(10)

        def listed(**fields: Any) -> list[str]:
            return [r.id for r in operator_store.list(JobFilter(**fields)).rows]

        assert listed(created_from_ms=t0 + 10) == [ids[2], ids[1]]
        assert listed(created_to_ms=t0 + 10) == [ids[0]]
        assert listed(created_from_ms=t0 + 10, created_to_ms=t0 + 20) == [ids[1]]
        assert listed(created_from_ms=t0 + 5, created_to_ms=t0 + 25) == [ids[2], ids[1]]

    @pytest.mark.parametrize("limit", [MAX_JOB_PAGE + 1, 0, -1])
    def test_list_limit_out_of_bounds_is_refused(self, operator_store: OperatorStore, limit: int) -> None:
        with raises_code("X_JOB_PAGE_INVALID"):
            operator_store.list(JobFilter(limit=limit))

    def test_list_max_page_is_allowed(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        driver.enqueue_many(requests(3))
        assert len(operator_store.list(JobFilter(limit=MAX_JOB_PAGE)).rows) == 3

    @pytest.mark.parametrize("which", ["after", "before"])
    @pytest.mark.parametrize("cursor", ["garbage", "", "jc1.", "jc1.e30", "jc1.eyJjIjoiMSIsImkiOiJ4In0"])
    def test_list_garbage_cursor_is_refused(self, operator_store: OperatorStore, which: str, cursor: str) -> None:
        flt = JobFilter(after=cursor) if which == "after" else JobFilter(before=cursor)
        with raises_code("X_JOB_PAGE_INVALID") as info:
            operator_store.list(flt)
        assert info.value.meta.get("cursor") == which

    def test_list_both_cursors_are_refused(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        driver.enqueue_many(requests(2))
        rows = operator_store.list(JobFilter()).rows
        with raises_code("X_JOB_PAGE_INVALID"):
            operator_store.list(JobFilter(after=job_cursor(rows[1]), before=job_cursor(rows[0])))

    def test_list_after_walks_every_row_once(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        for _ in range(4):  # pairs created in the same millisecond: the cursor must break the tie
            driver.enqueue_many(requests(2))
            clock.advance(1)
        newest_first = [r.id for r in operator_store.list(JobFilter()).rows]
        walked: list[str] = []
        flt = JobFilter(limit=3)
        for _ in range(10):
            page = operator_store.list(flt)
            walked.extend(r.id for r in page.rows)
            if page.is_last:
                break
            flt = replace(flt, after=job_cursor(page.rows[-1]))
        assert walked == newest_first and len(set(walked)) == 8

    def test_list_before_answers_the_nearest_newer_rows(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        for _ in range(7):
            driver.enqueue(request())
            clock.advance(1)
        rows = operator_store.list(JobFilter()).rows  # r6 .. r0
        ids = [r.id for r in rows]
        page = operator_store.list(JobFilter(before=job_cursor(rows[4]), limit=2))
        assert [r.id for r in page.rows] == ids[2:4]
        page = operator_store.list(JobFilter(before=job_cursor(rows[2]), limit=5))
        assert [r.id for r in page.rows] == ids[0:2]
        assert operator_store.list(JobFilter(before=job_cursor(rows[0]))).rows == ()

    def test_list_filters_apply_to_cursor_pages(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        for _ in range(3):
            driver.enqueue_many([request(queue="conformance-q1"), request(queue="conformance-q2")])
            clock.advance(1)
        flt = JobFilter(queue="conformance-q1", limit=1)
        first = operator_store.list(flt).rows[0]
        rest = operator_store.list(replace(flt, after=job_cursor(first), limit=10)).rows
        assert len(rest) == 2 and {r.queue for r in rest} == {"conformance-q1"}

    # -- remove --------------------------------------------------------------------------------

    def test_remove_deletes_the_row_and_its_steps(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        driver.enqueue(request(key="k"))
        job = claim_one(driver)
        assert driver.save_step(job.id, job.ref, _step("a", 1, clock.now_ms()))
        assert driver.nack(job.id, job.ref, NackOptions(error="e", dead_letter=True))
        operator_store.remove(job.id)
        assert operator_store.get(job.id) is None and operator_store.steps(job.id) == []
        again = driver.enqueue(request(key="k", id=job.id))  # the id is free again, and so is nothing else
        assert (again.id, again.deduped) == (job.id, False)
        assert claim_one(driver).steps == ()

    def test_remove_frees_a_live_key(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        first = driver.enqueue(request(key="k")).id
        operator_store.remove(first)
        again = driver.enqueue(request(key="k"))
        assert not again.deduped and again.id != first

    def test_remove_running_is_refused(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        with raises_code("X_JOB_NOT_REMOVABLE"):
            operator_store.remove(job.id)
        assert record(operator_store, job.id).state == "running"

    def test_remove_unknown_is_not_found(self, operator_store: OperatorStore) -> None:
        with raises_code("X_JOB_NOT_FOUND"):
            operator_store.remove(new_id())

    # -- requeue -------------------------------------------------------------------------------

    @pytest.mark.parametrize("state", ["done", "dead", "failed", "cancelled"])
    def test_requeue_resets_a_finished_job(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock, state: str
    ) -> None:
        job_id = driver.enqueue(request()).id
        if state == "cancelled":
            assert operator_store.cancel(job_id) is not None
        else:
            job = claim_one(driver)
            assert driver.nack(job.id, job.ref, NackOptions(error="e"))
            finish(driver, claim_one(driver), "done" if state == "done" else "dead" if state == "dead" else "failed")
            assert record(operator_store, job_id).attempts == 2
        clock.advance(1_000)
        row = operator_store.requeue(job_id)
        assert (row.id, row.state, row.attempts, row.run_at_ms) == (job_id, "ready", 0, clock.now_ms())
        assert record(operator_store, job_id).state == "ready"
        assert claim_one(driver).attempt == 1

    def test_requeue_live_is_refused(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        ready = driver.enqueue(request()).id
        delayed = driver.enqueue(request(run_at_ms=clock.now_ms() + 60_000)).id
        running = driver.enqueue(request(queue="conformance-b")).id
        claim_one(driver, queues=["conformance-b"])
        for job_id in (ready, delayed, running):
            with raises_code("X_JOB_NOT_REQUEUEABLE"):
                operator_store.requeue(job_id)
        assert record(operator_store, running).state == "running"

    def test_requeue_unknown_is_not_found(self, operator_store: OperatorStore) -> None:
        with raises_code("X_JOB_NOT_FOUND"):
            operator_store.requeue(new_id())

    def test_requeue_of_a_held_key_is_duplicate(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        done = enqueue_finished(driver, request(key="k"))
        live = driver.enqueue(request(key="k")).id
        with raises_code("X_JOB_DUPLICATE"):
            operator_store.requeue(done)
        assert record(operator_store, done).state == "done"
        assert claimed_ids(driver) == {live}

    def test_requeue_from_step_drops_that_step_and_later(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        for seq, name in enumerate(("fetch", "transform", "load"), start=1):
            assert driver.save_step(job.id, job.ref, _step(name, seq, clock.now_ms()))
        assert driver.ack(job.id, job.ref)
        row = operator_store.requeue(job.id, from_step="transform")
        assert (row.state, row.attempts) == ("ready", 0)
        assert [s.name for s in operator_store.steps(job.id)] == ["fetch"]
        replay = claim_one(driver)
        assert (replay.attempt, [s.name for s in replay.steps]) == (1, ["fetch"])

    def test_requeue_without_from_step_keeps_the_steps(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        assert driver.save_step(job.id, job.ref, _step("fetch", 1, clock.now_ms()))
        assert driver.nack(job.id, job.ref, NackOptions(error="e", dead_letter=True))
        operator_store.requeue(job.id)
        assert [s.name for s in claim_one(driver).steps] == ["fetch"]

    # -- cancel --------------------------------------------------------------------------------

    def test_cancel_a_queued_job(self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock) -> None:
        ready = driver.enqueue(request()).id
        delayed = driver.enqueue(request(run_at_ms=clock.now_ms() + 1_000)).id
        for job_id in (ready, delayed):
            row = operator_store.cancel(job_id, "not needed")
            assert row is not None and (row.id, row.state) == (job_id, "cancelled")
            assert record(operator_store, job_id).state == "cancelled"
        clock.advance(1_000)
        assert claim(driver) == []

    def test_cancel_a_running_job_fences_its_settles(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        row = operator_store.cancel(job.id)
        assert row is not None and row.state == "cancelled"
        assert driver.heartbeat([Heartbeat(job.id, job.ref)], visibility_timeout_ms=VT) == frozenset()
        assert driver.ack(job.id, job.ref) is False
        assert driver.nack(job.id, job.ref, NackOptions(error="late")) is False
        assert record(operator_store, job.id).state == "cancelled"

    def test_cancel_frees_the_key(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        first = driver.enqueue(request(key="k")).id
        assert operator_store.cancel(first) is not None
        again = driver.enqueue(request(key="k"))
        assert not again.deduped and again.id != first

    def test_cancel_a_finished_or_unknown_job_answers_none(
        self, driver: JobDriver, operator_store: OperatorStore
    ) -> None:
        done = enqueue_finished(driver, request())
        dead = enqueue_finished(driver, request(), "dead")
        assert operator_store.cancel(done) is None and operator_store.cancel(dead) is None
        assert (record(operator_store, done).state, record(operator_store, dead).state) == ("done", "dead")
        assert operator_store.cancel(new_id()) is None

    # -- bulk ----------------------------------------------------------------------------------

    def test_requeue_many_takes_the_oldest_of_a_shared_key(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        ids = []
        for _ in range(3):
            ids.append(driver.enqueue(request(key="shared")).id)
            assert operator_store.cancel(ids[-1]) is not None
            clock.advance(1)
        assert operator_store.requeue_many(BulkFilter(state="cancelled")) == BulkResult(affected=1, remaining=0)
        assert [record(operator_store, i).state for i in ids] == ["ready", "cancelled", "cancelled"]

    def test_requeue_many_skips_held_rows_and_does_not_count_them(
        self, driver: JobDriver, operator_store: OperatorStore
    ) -> None:
        held = driver.enqueue(request(key="held")).id
        assert operator_store.cancel(held) is not None
        live = driver.enqueue(request(key="held")).id
        free = driver.enqueue(request(key="free")).id
        assert operator_store.cancel(free) is not None
        assert operator_store.requeue_many(BulkFilter(state="cancelled")) == BulkResult(affected=1, remaining=0)
        assert (record(operator_store, held).state, record(operator_store, free).state) == ("cancelled", "ready")
        assert operator_store.requeue_many(BulkFilter(state="cancelled")) == BulkResult(affected=0, remaining=0)
        assert record(operator_store, live).state == "ready"

    def test_requeue_many_is_bounded_and_call_until_zero_ends(
        self, driver: JobDriver, operator_store: OperatorStore
    ) -> None:
        for answer in driver.enqueue_many(requests(MAX_BULK_ROWS + 1)):
            assert operator_store.cancel(answer.id) is not None
        flt = BulkFilter(state="cancelled", queue=QUEUE)
        assert operator_store.requeue_many(flt) == BulkResult(affected=MAX_BULK_ROWS, remaining=1)
        assert operator_store.requeue_many(flt) == BulkResult(affected=1, remaining=0)
        assert operator_store.requeue_many(flt) == BulkResult(affected=0, remaining=0)

    def test_requeue_many_over_a_live_state_is_refused(self, operator_store: OperatorStore) -> None:
        with raises_code("X_JOB_NOT_REQUEUEABLE"):
            operator_store.requeue_many(BulkFilter(state="ready"))

    def test_bulk_filters_narrow_the_set(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        keep = [
            driver.enqueue(request("conformance.other")).id,
            driver.enqueue(request(tenant_id="org-2")).id,
            driver.enqueue(request(queue="conformance-b")).id,
        ]
        gone = driver.enqueue(request(tenant_id="org-1")).id
        flt = BulkFilter(state="ready", queue=QUEUE, name=JOB, tenant_id="org-1")
        assert operator_store.remove_many(flt) == BulkResult(affected=1, remaining=0)
        assert operator_store.get(gone) is None
        assert all(operator_store.get(i) is not None for i in keep)

    def test_remove_many_is_bounded(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        driver.enqueue_many(requests(MAX_BULK_ROWS + 1))
        flt = BulkFilter(state="ready")
        assert operator_store.remove_many(flt) == BulkResult(affected=MAX_BULK_ROWS, remaining=1)
        assert operator_store.remove_many(flt) == BulkResult(affected=1, remaining=0)
        assert operator_store.list(JobFilter()).rows == ()

    def test_remove_many_of_running_is_refused(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        with raises_code("X_JOB_NOT_REMOVABLE"):
            operator_store.remove_many(BulkFilter(state="running"))
        assert record(operator_store, job.id).state == "running"

    def test_promote_many_is_bounded(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        driver.enqueue_many(requests(MAX_BULK_ROWS + 1, run_at_ms=clock.now_ms() + 60_000))
        flt = BulkFilter(state="delayed")
        assert operator_store.promote_many(flt) == BulkResult(affected=MAX_BULK_ROWS, remaining=1)
        assert operator_store.promote_many(flt) == BulkResult(affected=1, remaining=0)
        assert len(claim(driver, limit=MAX_BULK_ROWS + 10)) == MAX_BULK_ROWS + 1

    def test_promote_many_moves_only_waiting_rows(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        assert driver.nack(job.id, job.ref, NackOptions(error="e", run_at_ms=clock.now_ms() + 60_000))  # backing off
        due = driver.enqueue(request()).id
        assert operator_store.promote_many(BulkFilter(state="ready")) == BulkResult(affected=1, remaining=0)
        assert claimed_ids(driver) == {job.id, due}

    def test_promote_many_over_a_finished_state_is_refused(self, operator_store: OperatorStore) -> None:
        with raises_code("X_JOB_NOT_PROMOTABLE"):
            operator_store.promote_many(BulkFilter(state="done"))

    # -- promote -------------------------------------------------------------------------------

    def test_promote_makes_a_delayed_job_due(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        job_id = driver.enqueue(request(run_at_ms=clock.now_ms() + 60_000)).id
        row = operator_store.promote(job_id)
        assert (row.id, row.state, row.run_at_ms) == (job_id, "ready", clock.now_ms())
        assert claimed_ids(driver) == {job_id}

    def test_promote_a_backing_off_job(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        assert driver.nack(job.id, job.ref, NackOptions(error="e", run_at_ms=clock.now_ms() + 60_000))
        assert operator_store.promote(job.id).run_at_ms == clock.now_ms()
        assert claim_one(driver).attempt == 2

    def test_promote_a_job_not_waiting_is_refused(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        due = driver.enqueue(request()).id
        done = enqueue_finished(driver, request(queue="conformance-b"))
        running = driver.enqueue(request(queue="conformance-b")).id
        claim_one(driver, queues=["conformance-b"])
        for job_id in (due, done, running):
            with raises_code("X_JOB_NOT_PROMOTABLE"):
                operator_store.promote(job_id)

    # -- pauses --------------------------------------------------------------------------------

    def test_paused_queue_is_not_claimed_but_enqueues_land(
        self, driver: JobDriver, operator_store: OperatorStore
    ) -> None:
        operator_store.pause_queue(QUEUE)
        job_id = driver.enqueue(request()).id
        other = driver.enqueue(request(queue="conformance-b")).id
        assert record(operator_store, job_id).state == "ready"
        assert claimed_ids(driver, queues=[QUEUE, "conformance-b"]) == {other}
        assert operator_store.paused_queues() == [QUEUE]
        stats = {s.queue: s for s in driver.stats()}
        assert (stats[QUEUE].paused, stats[QUEUE].ready) == (True, 1)
        assert not stats["conformance-b"].paused

    def test_resumed_queue_is_claimable(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        job_id = driver.enqueue(request()).id
        operator_store.pause_queue(QUEUE)
        operator_store.pause_queue(QUEUE)
        assert claim(driver) == []
        operator_store.resume_queue(QUEUE)
        assert operator_store.paused_queues() == []
        assert claimed_ids(driver) == {job_id}
        operator_store.resume_queue("conformance-never-paused")

    def test_pause_and_resume_tasks(self, operator_store: OperatorStore) -> None:
        assert operator_store.paused_tasks() == []
        operator_store.pause_task("conformance.nightly")
        operator_store.pause_task("conformance.hourly")
        operator_store.pause_task("conformance.hourly")
        assert sorted(operator_store.paused_tasks()) == ["conformance.hourly", "conformance.nightly"]
        operator_store.resume_task("conformance.nightly")
        operator_store.resume_task("conformance.never-paused")
        assert operator_store.paused_tasks() == ["conformance.hourly"]

    # -- workers, progress, task fires ---------------------------------------------------------

    def test_workers_expire_one_visibility_timeout_after_their_heartbeat(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        window = driver.visibility_timeout_ms  # the window the driver declares, whatever it was built with
        first = _worker("w1", clock.now_ms())
        driver.record_worker(first)
        assert operator_store.workers() == [first]
        clock.advance(window - 1)
        beat = replace(first, heartbeat_at_ms=clock.now_ms(), in_flight=(new_id(),))
        driver.record_worker(beat)
        clock.advance(window - 1)
        assert operator_store.workers() == [beat]
        clock.advance(1)
        assert operator_store.workers() == []

    def test_workers_lists_every_live_worker(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        assert operator_store.workers() == []
        driver.record_worker(_worker("w1", clock.now_ms()))
        driver.record_worker(_worker("w2", clock.now_ms()))
        driver.record_worker(_worker("w-stale", clock.now_ms() - driver.visibility_timeout_ms))
        assert {w.id for w in operator_store.workers()} == {"w1", "w2"}

    def test_workers_truncate_in_flight_ids(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        in_flight = tuple(new_id() for _ in range(MAX_WORKER_IN_FLIGHT + 50))
        driver.record_worker(_worker("w1", clock.now_ms(), in_flight))
        [worker] = operator_store.workers()
        assert worker.in_flight == in_flight[:MAX_WORKER_IN_FLIGHT]

    def test_a_claim_carrying_a_registry_row_writes_it_whether_or_not_it_takes_a_job(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        idle = _worker("w1", clock.now_ms())
        assert list(driver.claim(queues=[QUEUE], limit=1, worker_id="w1", record=idle).jobs) == []
        assert operator_store.workers() == [idle]
        driver.enqueue(request())
        clock.advance(1_000)
        busy = replace(idle, heartbeat_at_ms=clock.now_ms(), in_flight=(new_id(),))
        assert len(driver.claim(queues=[QUEUE], limit=1, worker_id="w1", record=busy).jobs) == 1
        assert operator_store.workers() == [busy]
        driver.claim(queues=[QUEUE], limit=1, worker_id="w1")  # no row carried: the registry is left alone
        assert operator_store.workers() == [busy]

    def test_remove_worker(self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock) -> None:
        driver.record_worker(_worker("w1", clock.now_ms()))
        driver.record_worker(_worker("w2", clock.now_ms()))
        driver.remove_worker("w1")
        driver.remove_worker("w-unknown")
        assert [w.id for w in operator_store.workers()] == ["w2"]

    def test_record_progress_is_fenced_on_the_claim(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        driver.enqueue(request(max_attempts=3))
        old = claim_one(driver, worker="w1")
        half = Progress(done=1, total=2, note="half", at_ms=clock.now_ms())
        assert driver.record_progress(old.id, old.ref, half) is True
        assert record(operator_store, old.id).progress == half
        clock.advance(VT)
        new = claim_one(driver, worker="w1")
        late = Progress(done=2, total=2, note=None, at_ms=clock.now_ms())
        with caplog.at_level(logging.WARNING, logger="ultimate_jobs"):
            assert driver.record_progress(old.id, old.ref, late) is False
        assert [r.getMessage() for r in caplog.records] == ["jobs.settle.unowned"]
        assert driver.record_progress(new.id, new.ref, late) is True
        assert record(operator_store, new.id).progress == late
        assert driver.ack(new.id, new.ref)
        assert driver.record_progress(new.id, new.ref, half) is False
        assert record(operator_store, new.id).progress == late


def run_bins(counts: dict[int, int]) -> tuple[int, ...]:
    """A counter bucket's ``run_bins`` with ``counts[i]`` settles in run-time bin ``i`` (the others none)."""
    return tuple(counts.get(i, 0) for i in range(WAIT_BINS))
