"""``driver.purge_finished``: retention deletes finished rows past their state's instant, with their steps,
a bounded batch at a time, oldest finished first — and never a live row."""

from __future__ import annotations

from typing import Literal

from ..contracts.jobs import JobState, StepRecord
from ..contracts.protocol import JobDriver, OperatorStore
from .clock import FrozenClock
from .conformance_support import claim_one, finish, raises_code, request

HOUR = 3_600_000


def _finished_with_step(driver: JobDriver, key: str, state: Literal["done", "dead", "failed"] = "done") -> str:
    """A row settled ``state`` now, holding one persisted step."""
    job_id = driver.enqueue(request(key=key)).id
    job = claim_one(driver)
    assert job.id == job_id
    at = job.created_at_ms
    step = StepRecord(name="work", seq=1, status="done", output={"k": key}, started_at_ms=at, finished_at_ms=at)
    assert driver.save_step(job.id, job.ref, step)
    finish(driver, job, state)
    return job_id


class RetentionContract:
    """Every driver deletes the same rows for the same history and cutoffs."""

    def test_purge_finished_removes_rows_past_their_cutoff_with_their_steps(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        old_done = _finished_with_step(driver, "old-done")
        old_dead = _finished_with_step(driver, "old-dead", "dead")
        clock.advance(2 * HOUR)
        young_done = _finished_with_step(driver, "young-done")
        live = driver.enqueue(request(key="live", run_at_ms=clock.now_ms() + HOUR)).id  # delayed: live
        running = driver.enqueue(request(key="running")).id
        assert claim_one(driver).id == running
        clock.advance(HOUR)
        now = clock.now_ms()
        removed = driver.purge_finished(before_ms={"done": now - 2 * HOUR, "dead": now - 2 * HOUR, "failed": now})
        assert removed == 2
        assert operator_store.get(old_done) is None and operator_store.get(old_dead) is None
        assert operator_store.steps(old_done) == [] and operator_store.steps(old_dead) == []
        kept = {young_done, live, running}
        assert all(operator_store.get(job_id) is not None for job_id in kept)
        assert [s.name for s in operator_store.steps(young_done)] == ["work"]
        assert driver.purge_finished(before_ms={"done": now - 2 * HOUR}) == 0

    def test_purge_finished_takes_only_the_states_named(self, driver: JobDriver, operator_store: OperatorStore) -> None:
        done = _finished_with_step(driver, "done")
        dead = _finished_with_step(driver, "dead", "dead")
        failed = _finished_with_step(driver, "failed", "failed")
        far = 10**13
        assert driver.purge_finished(before_ms={"dead": far}) == 1
        assert operator_store.get(dead) is None
        assert operator_store.get(done) is not None and operator_store.get(failed) is not None
        assert driver.purge_finished(before_ms={}) == 0

    def test_purge_finished_is_bounded_and_oldest_first(
        self, driver: JobDriver, operator_store: OperatorStore, clock: FrozenClock
    ) -> None:
        ids = []
        for n in range(5):
            ids.append(_finished_with_step(driver, f"batch-{n}"))
            clock.advance(1_000)
        cutoff: dict[JobState, int] = {"done": clock.now_ms()}
        assert driver.purge_finished(before_ms=cutoff, limit=2) == 2
        assert [operator_store.get(job_id) is None for job_id in ids] == [True, True, False, False, False]
        assert driver.purge_finished(before_ms=cutoff, limit=2) == 2
        assert driver.purge_finished(before_ms=cutoff, limit=2) == 1
        assert driver.purge_finished(before_ms=cutoff, limit=2) == 0
        assert all(operator_store.get(job_id) is None for job_id in ids)

    def test_purge_finished_refuses_a_live_state_and_a_bad_limit(self, driver: JobDriver) -> None:
        live = driver.enqueue(request(key="live")).id
        with raises_code("X_INVARIANT"):
            driver.purge_finished(before_ms={"ready": 10**13})
        with raises_code("X_INVARIANT"):
            driver.purge_finished(before_ms={"done": 10**13}, limit=0)
        assert claim_one(driver).id == live
