"""The queue half of the conformance suite: enqueue, claim, the claim fence, settles, steps and stats.

A mixin of :class:`~ultimate_jobs.testing.conformance.DriverConformance`; it reads the ``driver`` and
``clock`` fixtures that class defines. Only the driver protocol is used, so these scenarios hold
for a driver with no ``operator`` too.
"""

from __future__ import annotations

import logging
import re

import pytest

from ..contracts.jobs import ClaimRef, Heartbeat, NackOptions, StepRecord
from ..contracts.protocol import JobDriver
from .clock import FrozenClock
from .conformance_support import (
    JOB,
    QUEUE,
    VT,
    claim,
    claim_one,
    claimed_ids,
    enqueue_finished,
    new_id,
    raises_code,
    request,
    requests,
)


class QueueContract:
    """Enqueue, claim, fence, settle: what every driver does with or without an operator surface."""

    # -- the contract's declarations -----------------------------------------------------------

    def test_the_driver_declares_every_capability(self, driver: JobDriver) -> None:
        from ..contracts.base import undeclared_capabilities

        assert undeclared_capabilities(driver) == []

    def test_a_claim_leases_for_the_drivers_window_unless_told_otherwise(
        self, driver: JobDriver, clock: FrozenClock
    ) -> None:
        window = driver.visibility_timeout_ms
        assert isinstance(window, int) and window > 0
        driver.enqueue(request(key="default-window"))
        driver.enqueue(request(key="told"))
        [first] = driver.claim(queues=[QUEUE], limit=1, worker_id="w1").jobs
        assert first.lease_until_ms == clock.now_ms() + window
        [second] = driver.claim(queues=[QUEUE], limit=1, worker_id="w1", visibility_timeout_ms=window + 5_000).jobs
        assert second.lease_until_ms == clock.now_ms() + window + 5_000

    # -- enqueue -------------------------------------------------------------------------------

    def test_enqueue_answers_fresh_ids(self, driver: JobDriver) -> None:
        first = driver.enqueue(request())
        second = driver.enqueue(request())
        assert first.id and first.run_id and not first.deduped
        assert second.id and second.run_id and not second.deduped
        assert first.id != second.id and first.run_id != second.run_id

    def test_enqueue_keeps_requested_ids(self, driver: JobDriver) -> None:
        job_id, run_id = new_id(), new_id()
        answer = driver.enqueue(request(id=job_id, run_id=run_id))
        assert (answer.id, answer.run_id, answer.deduped) == (job_id, run_id, False)
        job = claim_one(driver)
        assert (job.id, job.run_id) == (job_id, run_id)

    def test_enqueue_dedupes_a_live_key(self, driver: JobDriver) -> None:
        first = driver.enqueue(request(key="k", tenant_id="org-1"))
        again = driver.enqueue(request(key="k", tenant_id="org-1", input={"other": True}))
        assert again.deduped
        assert (again.id, again.run_id) == (first.id, first.run_id)
        assert claimed_ids(driver) == {first.id}

    def test_enqueue_dedupes_a_running_key(self, driver: JobDriver) -> None:
        first = driver.enqueue(request(key="k"))
        claim_one(driver)
        again = driver.enqueue(request(key="k"))
        assert again.deduped and again.id == first.id

    def test_enqueue_key_is_per_tenant_and_per_name(self, driver: JobDriver) -> None:
        base = driver.enqueue(request(key="k", tenant_id="org-1"))
        other_tenant = driver.enqueue(request(key="k", tenant_id="org-2"))
        no_tenant = driver.enqueue(request(key="k"))
        other_name = driver.enqueue(request("conformance.other", key="k", tenant_id="org-1"))
        answers = [base, other_tenant, no_tenant, other_name]
        assert not any(a.deduped for a in answers)
        assert len({a.id for a in answers}) == 4

    def test_enqueue_on_conflict_error_raises_duplicate(self, driver: JobDriver) -> None:
        first = driver.enqueue(request(key="k"))
        with raises_code("X_JOB_DUPLICATE"):
            driver.enqueue(request(key="k", on_conflict="error"))
        assert claimed_ids(driver) == {first.id}

    def test_enqueue_existing_id_inserts_nothing_even_when_finished(self, driver: JobDriver) -> None:
        job_id = enqueue_finished(driver, request(id=new_id()))
        again = driver.enqueue(request(id=job_id))  # a fresh key: only the id collides
        assert again.id == job_id and again.deduped
        assert claim(driver) == []

    def test_enqueue_existing_live_id_inserts_nothing(self, driver: JobDriver) -> None:
        job_id = new_id()
        driver.enqueue(request(id=job_id, key="k"))
        again = driver.enqueue(request(id=job_id, key="k", on_conflict="error"))  # a relay's repeat publish
        assert again.id == job_id and again.deduped
        assert claimed_ids(driver) == {job_id}

    def test_enqueue_an_id_of_another_tenants_row_is_refused_and_says_nothing_of_it(self, driver: JobDriver) -> None:
        job_id = new_id()
        theirs = driver.enqueue(request(id=job_id, key="theirs", tenant_id="org-2"))
        for tenant in ("org-1", None):  # another org, and no org, are other tenants alike
            with raises_code("X_JOB_DUPLICATE") as info:
                driver.enqueue(request(id=job_id, key="mine", tenant_id=tenant))
            said = f"{info.value.message} {info.value.meta!r}"
            assert theirs.run_id not in said and "org-2" not in said and not re.search(r"\bready\b", said)
        with raises_code("X_JOB_DUPLICATE"):  # all or nothing: the batch's other row is not written either
            driver.enqueue_many([request(key="fresh", tenant_id="org-1"), request(id=job_id, tenant_id="org-1")])
        assert claimed_ids(driver) == {job_id}

    def test_enqueue_an_id_of_the_same_tenants_row_answers_it(self, driver: JobDriver) -> None:
        job_id = new_id()
        first = driver.enqueue(request(id=job_id, key="k1", tenant_id="org-1"))
        again = driver.enqueue(request(id=job_id, key="k2", tenant_id="org-1"))
        assert (again.id, again.run_id, again.deduped) == (job_id, first.run_id, True)

    def test_enqueue_key_treats_no_tenant_as_empty_tenant(self, driver: JobDriver) -> None:
        first = driver.enqueue(request(key="k"))
        again = driver.enqueue(request(key="k", tenant_id=""))
        assert again.deduped and again.id == first.id

    def test_finished_key_can_be_enqueued_again(self, driver: JobDriver) -> None:
        done_id = enqueue_finished(driver, request(key="k"))
        again = driver.enqueue(request(key="k"))
        assert not again.deduped and again.id != done_id
        assert claimed_ids(driver) == {again.id}

    def test_enqueue_many_answers_in_order(self, driver: JobDriver) -> None:
        live = driver.enqueue(request(key="held"))
        answers = driver.enqueue_many([request(key="a"), request(key="held"), request(key="b"), request(key="a")])
        assert [a.deduped for a in answers] == [False, True, False, True]
        assert answers[1].id == live.id
        assert answers[3].id == answers[0].id
        assert claimed_ids(driver) == {live.id, answers[0].id, answers[2].id}

    def test_enqueue_many_of_nothing_answers_nothing(self, driver: JobDriver) -> None:
        assert driver.enqueue_many([]) == []

    def test_enqueue_many_that_raises_inserts_nothing(self, driver: JobDriver) -> None:
        held = driver.enqueue(request(key="held")).id
        with raises_code("X_JOB_DUPLICATE"):
            driver.enqueue_many([request(key="fresh"), request(key="held", on_conflict="error")])
        assert claimed_ids(driver) == {held}
        assert not driver.enqueue(request(key="fresh")).deduped

    def test_stored_input_is_a_copy(self, driver: JobDriver) -> None:
        items = [1]
        driver.enqueue(request(input={"items": items}))
        items.append(2)  # the caller's object, after the enqueue
        job = claim_one(driver)
        assert dict(job.input) == {"items": [1]}
        job.input["items"].append(3)  # the worker's object, after the claim
        assert driver.nack(job.id, job.ref, NackOptions(count_attempt=False))
        assert dict(claim_one(driver).input) == {"items": [1]}

    # -- claim ---------------------------------------------------------------------------------

    def test_delayed_row_waits_for_its_run_at(self, driver: JobDriver, clock: FrozenClock) -> None:
        job_id = driver.enqueue(request(run_at_ms=clock.now_ms() + 5_000)).id
        assert claim(driver) == []
        clock.advance(4_999)
        assert claim(driver) == []
        clock.advance(1)
        assert claimed_ids(driver) == {job_id}

    def test_claim_honours_its_limit(self, driver: JobDriver) -> None:
        driver.enqueue_many([request() for _ in range(5)])
        sizes = [len(claim(driver, limit=2)) for _ in range(4)]
        assert sizes == [2, 2, 1, 0]

    def test_claim_reads_only_named_queues(self, driver: JobDriver) -> None:
        a = driver.enqueue(request(queue="conformance-a")).id
        b = driver.enqueue(request(queue="conformance-b")).id
        driver.enqueue(request(queue="conformance-c"))
        assert claimed_ids(driver, queues=["conformance-a"]) == {a}
        assert claimed_ids(driver, queues=["conformance-b", "conformance-a"]) == {b}

    def test_one_claim_caps_each_queue_at_its_own_limit(self, driver: JobDriver) -> None:
        driver.enqueue_many(requests(3, queue="conformance-a") + requests(3, queue="conformance-b"))
        got = driver.claim(
            queues=["conformance-a", "conformance-b"],
            limit=10,
            worker_id="w1",
            visibility_timeout_ms=VT,
            queue_limits={"conformance-a": 1, "conformance-b": 2},
        )
        assert sorted(job.queue for job in got.jobs) == ["conformance-a", "conformance-b", "conformance-b"]

    def test_rows_due_at_one_instant_are_claimed_in_enqueue_order(self, driver: JobDriver) -> None:
        ids = [driver.enqueue(request()).id for _ in range(5)]
        assert [claim_one(driver).id for _ in range(5)] == ids

    def test_claim_orders_by_priority_then_run_at(self, driver: JobDriver, clock: FrozenClock) -> None:
        low_old = driver.enqueue(request(priority=0)).id
        clock.advance(1_000)
        high_new = driver.enqueue(request(priority=5)).id
        clock.advance(1_000)
        low_new = driver.enqueue(request(priority=0)).id
        high_old = driver.enqueue(request(priority=5, run_at_ms=clock.now_ms() - 1_500)).id
        order = [claim_one(driver).id for _ in range(4)]
        assert order == [high_old, high_new, low_old, low_new]

    def test_claim_without_queues_is_refused(self, driver: JobDriver) -> None:
        with raises_code("X_JOB_CLAIM_QUEUES_EMPTY"):
            driver.claim(queues=[], limit=1, worker_id="w1")

    def test_claimed_job_carries_its_row(self, driver: JobDriver, clock: FrozenClock) -> None:
        answer = driver.enqueue(
            request(key="k", tenant_id="org-1", input={"org": "org-1", "n": 2}, max_attempts=4, priority=3)
        )
        job = claim_one(driver, worker="w9")
        assert (job.id, job.run_id, job.name, job.queue) == (answer.id, answer.run_id, JOB, QUEUE)
        assert (job.tenant_id, job.idempotency_key, dict(job.input)) == ("org-1", "k", {"org": "org-1", "n": 2})
        assert (job.attempt, job.max_attempts, job.priority) == (1, 4, 3)
        assert (job.worker_id, job.lease_until_ms) == ("w9", clock.now_ms() + VT)
        assert job.claim and job.ref == ClaimRef("w9", job.claim)
        assert job.steps == ()

    def test_each_claim_spends_an_attempt(self, driver: JobDriver) -> None:
        driver.enqueue(request())
        first = claim_one(driver)
        assert driver.nack(first.id, first.ref, NackOptions(error="boom"))
        second = claim_one(driver)
        assert (first.attempt, second.attempt) == (1, 2)
        assert second.claim != first.claim

    # -- the visibility timeout and the claim fence ---------------------------------------------

    def test_live_lease_is_not_reclaimed(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request())
        claim_one(driver, worker="w1")
        clock.advance(VT - 1)
        assert claim(driver, worker="w2") == []

    def test_lapsed_lease_is_reclaimed_and_fences_the_old_claim(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request(max_attempts=3))
        old = claim_one(driver, worker="w1")
        clock.advance(VT)
        new = claim_one(driver, worker="w2")
        assert (new.id, new.attempt, new.worker_id) == (old.id, 2, "w2")
        step = StepRecord(name="s", seq=1, status="done", output=1, started_at_ms=clock.now_ms())
        assert driver.ack(old.id, old.ref) is False
        assert driver.nack(old.id, old.ref, NackOptions(error="late")) is False
        assert driver.heartbeat([Heartbeat(old.id, old.ref)], visibility_timeout_ms=VT) == frozenset()
        assert driver.save_step(old.id, old.ref, step) is False
        assert driver.ack(new.id, new.ref) is True

    def test_same_worker_reclaim_fences_its_old_claim(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request(max_attempts=3))
        old = claim_one(driver, worker="w1")
        clock.advance(VT)
        new = claim_one(driver, worker="w1")
        assert new.id == old.id and new.claim != old.claim
        assert driver.heartbeat([Heartbeat(old.id, old.ref)], visibility_timeout_ms=VT) == frozenset()
        assert driver.ack(old.id, old.ref) is False
        assert driver.ack(new.id, new.ref) is True

    def test_settle_with_a_forged_ref_does_not_land(self, driver: JobDriver) -> None:
        driver.enqueue(request())
        job = claim_one(driver, worker="w1")
        assert driver.ack(job.id, ClaimRef("w1", "not-the-claim")) is False
        assert driver.ack(job.id, ClaimRef("w2", job.claim)) is False
        assert driver.ack(new_id(), job.ref) is False
        assert driver.ack(job.id, job.ref) is True

    def test_lapsed_but_unclaimed_lease_still_settles(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        clock.advance(VT + 1)  # nobody claimed it again: the fence is the claim, not the clock
        assert driver.heartbeat([Heartbeat(job.id, job.ref)], visibility_timeout_ms=VT) == frozenset({job.id})
        assert driver.ack(job.id, job.ref) is True

    def test_unowned_settles_log_settle_unowned(
        self, driver: JobDriver, clock: FrozenClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        driver.enqueue(request(max_attempts=3))
        old = claim_one(driver, worker="w1")
        clock.advance(VT)
        claim_one(driver, worker="w2")
        step = StepRecord(name="s", seq=1, status="done", output=1, started_at_ms=clock.now_ms())
        with caplog.at_level(logging.WARNING, logger="ultimate_jobs"):
            assert driver.ack(old.id, old.ref) is False
            assert driver.nack(old.id, old.ref, NackOptions(error="late")) is False
            assert driver.save_step(old.id, old.ref, step) is False
            # a missed renewal is answered, not logged: the worker tells a lost lease from a renewal that
            # crossed the job's own settle (which is nothing to warn about)
            assert driver.heartbeat([Heartbeat(old.id, old.ref)], visibility_timeout_ms=VT) == frozenset()
        unowned = [r for r in caplog.records if r.getMessage() == "jobs.settle.unowned"]
        assert [r.jobs["op"] for r in unowned] == ["ack", "nack", "save_step"]  # type: ignore[attr-defined]
        assert all(r.levelno == logging.WARNING for r in unowned)

    def test_lapsed_final_attempt_is_buried_not_handed_out(self, driver: JobDriver, clock: FrozenClock) -> None:
        job_id = driver.enqueue(request(max_attempts=2, tenant_id="org-1", input={"a": 1})).id
        for worker in ("w1", "w2"):
            got = driver.claim(queues=[QUEUE], limit=5, worker_id=worker, visibility_timeout_ms=VT)
            assert [j.id for j in got.jobs] == [job_id] and list(got.buried) == []
            clock.advance(VT)
        first = driver.claim(queues=[QUEUE], limit=5, worker_id="w3")
        assert list(first.jobs) == [] and len(first.buried) == 1
        again = driver.claim(queues=[QUEUE], limit=5, worker_id="w3")
        assert (list(again.jobs), list(again.buried)) == ([], []), "a row is buried once"
        buried = first.buried[0]
        assert (buried.id, buried.name, buried.queue, buried.tenant_id) == (job_id, JOB, QUEUE, "org-1")
        assert (buried.attempt, buried.state, dict(buried.input)) == (2, "dead", {"a": 1})

    def test_lapsed_final_attempt_of_a_dropped_job_is_buried_failed(
        self, driver: JobDriver, clock: FrozenClock
    ) -> None:
        driver.enqueue(request("conformance.dropped", max_attempts=1))
        driver.enqueue(request("conformance.kept", max_attempts=1))
        assert len(claim(driver)) == 2
        clock.advance(VT)
        drop = frozenset({"conformance.dropped"})
        got = driver.claim(queues=[QUEUE], limit=5, worker_id="w2", drop_exhausted=drop)
        assert list(got.jobs) == []
        assert sorted((j.name, j.state) for j in got.buried) == [
            ("conformance.dropped", "failed"),
            ("conformance.kept", "dead"),
        ]

    def test_lapsed_earlier_attempt_is_not_buried(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request(max_attempts=2))
        claim_one(driver)
        clock.advance(VT)
        got = driver.claim(queues=[QUEUE], limit=5, worker_id="w2", visibility_timeout_ms=VT)
        assert [j.attempt for j in got.jobs] == [2] and list(got.buried) == []

    # -- settles -------------------------------------------------------------------------------

    def test_ack_lands_once(self, driver: JobDriver) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        assert driver.ack(job.id, job.ref, duration_ms=12) is True
        assert driver.ack(job.id, job.ref) is False
        assert claim(driver) == []

    def test_nack_retry_waits_for_its_run_at(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        assert driver.nack(job.id, job.ref, NackOptions(error="boom", run_at_ms=clock.now_ms() + 2_000))
        clock.advance(1_999)
        assert claim(driver) == []
        clock.advance(1)
        assert claim_one(driver).attempt == 2

    def test_nack_dead_letter_and_fail_are_terminal(self, driver: JobDriver) -> None:
        driver.enqueue_many([request(), request()])
        first, second = claim(driver)
        assert driver.nack(first.id, first.ref, NackOptions(error="x", dead_letter=True))
        assert driver.nack(second.id, second.ref, NackOptions(error="y", fail=True))
        assert claim(driver) == []

    def test_nack_park_suspends_until_run_at(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        parked = NackOptions(park=True, count_attempt=False, run_at_ms=clock.now_ms() + 60_000)
        assert driver.nack(job.id, job.ref, parked)
        clock.advance(59_999)
        assert claim(driver) == []
        clock.advance(1)
        woken = claim_one(driver)
        assert (woken.id, woken.attempt) == (job.id, 1)

    def test_uncounted_nack_hands_the_attempt_back(self, driver: JobDriver) -> None:
        driver.enqueue(request(max_attempts=1))
        first = claim_one(driver)
        assert driver.nack(first.id, first.ref, NackOptions(count_attempt=False))
        again = claim_one(driver)
        assert (again.id, again.attempt) == (first.id, 1)

    def test_heartbeat_renews_only_owned_leases(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue_many([request(), request(), request()])
        a, b = claim(driver, worker="w1", limit=2)
        c = claim_one(driver, worker="w2")
        clock.advance(VT // 2)
        beats = [
            Heartbeat(a.id, a.ref),
            Heartbeat(b.id, ClaimRef("w1", "not-the-claim")),
            Heartbeat(c.id, ClaimRef("w1", c.claim)),
        ]
        assert driver.heartbeat(beats, visibility_timeout_ms=VT) == frozenset({a.id})
        clock.advance(VT // 2)
        assert claimed_ids(driver, worker="w3") == {b.id, c.id}
        assert driver.ack(a.id, a.ref) is True

    def test_heartbeat_answers_every_renewed_id(self, driver: JobDriver) -> None:
        driver.enqueue_many([request() for _ in range(3)])
        jobs = claim(driver)
        beats = [Heartbeat(j.id, j.ref) for j in jobs]
        assert driver.heartbeat(beats, visibility_timeout_ms=VT) == frozenset(j.id for j in jobs)
        assert driver.heartbeat([], visibility_timeout_ms=VT) == frozenset()

    def test_heartbeat_does_not_renew_a_settled_row(self, driver: JobDriver) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        assert driver.ack(job.id, job.ref)
        assert driver.heartbeat([Heartbeat(job.id, job.ref)], visibility_timeout_ms=VT) == frozenset()

    def test_steps_replay_in_seq_order(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        now = clock.now_ms()
        for name, seq in (("third", 3), ("first", 1), ("second", 2)):
            step = StepRecord(
                name=name, seq=seq, status="done", output={"step": name}, started_at_ms=now, finished_at_ms=now
            )
            assert driver.save_step(job.id, job.ref, step)
        assert driver.nack(job.id, job.ref, NackOptions(count_attempt=False))
        replay = claim_one(driver).steps
        assert [(s.name, s.seq, s.status, s.output) for s in replay] == [
            ("first", 1, "done", {"step": "first"}),
            ("second", 2, "done", {"step": "second"}),
            ("third", 3, "done", {"step": "third"}),
        ]

    def test_every_json_output_replays_as_saved(self, driver: JobDriver, clock: FrozenClock) -> None:
        outputs = ["text", "", "null", "{not json", 7, 2.5, True, None, [1, "a"], {"k": {"n": None}}]
        driver.enqueue(request())
        job = claim_one(driver)
        for seq, output in enumerate(outputs, start=1):
            step = StepRecord(name=f"s{seq}", seq=seq, status="done", output=output, started_at_ms=clock.now_ms())
            assert driver.save_step(job.id, job.ref, step)
        assert driver.nack(job.id, job.ref, NackOptions(count_attempt=False))
        assert [s.output for s in claim_one(driver).steps] == outputs
        assert [s.output for s in driver.operator.steps(job.id)] == outputs if driver.operator else True

    def test_saved_step_output_is_a_copy(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request())
        job = claim_one(driver)
        rows = [1]
        step = StepRecord(name="s", seq=1, status="done", output={"rows": rows}, started_at_ms=clock.now_ms())
        assert driver.save_step(job.id, job.ref, step)
        rows.append(2)
        assert driver.nack(job.id, job.ref, NackOptions(count_attempt=False))
        [replayed] = claim_one(driver).steps
        assert replayed.output == {"rows": [1]}

    # -- stats and close -----------------------------------------------------------------------

    def test_stats_counts_per_queue(self, driver: JobDriver, clock: FrozenClock) -> None:
        driver.enqueue(request(queue="conformance-s1"))  # the oldest: the claim below takes it
        clock.advance(1_000)
        second_at = clock.now_ms()
        driver.enqueue_many([request(queue="conformance-s1"), request(queue="conformance-s1")])
        driver.enqueue(request(queue="conformance-s1", run_at_ms=clock.now_ms() + 60_000))
        assert claim_one(driver, queues=["conformance-s1"])
        enqueue_finished(driver, request(queue="conformance-s2"))
        enqueue_finished(driver, request(queue="conformance-s3"), "dead")
        enqueue_finished(driver, request(queue="conformance-s3"), "failed")
        stats = {s.queue: s for s in driver.stats()}
        s1, s3 = stats["conformance-s1"], stats["conformance-s3"]
        assert (s1.ready, s1.delayed, s1.running, s1.dead) == (2, 1, 1, 0)
        assert s1.oldest_ready_ms == second_at
        assert (s3.ready, s3.running, s3.dead, s3.oldest_ready_ms) == (0, 0, 1, None)  # the dead-letter queue
        assert "conformance-s2" not in stats  # done, failed and cancelled rows are history, not counted
        assert not s1.paused and not s3.paused

    def test_close_is_idempotent(self, driver: JobDriver) -> None:
        driver.close()
        driver.close()
