"""The fairness half of the conformance suite: a queue named in ``driver.fair_queues`` serves its orgs in
turn.

A mixin of :class:`~ultimate_jobs.testing.conformance.DriverConformance`. Each scenario names the queue
:data:`FAIR` fair on the suite's ``driver`` (``driver.fair_queues``) before it enqueues, as
``ULTIMATE_JOBS["FAIR_QUEUES"]`` does for a configured driver. The rules every driver keeps:

- Each claim of a fair queue serves the orgs (lanes: the job's tenant; no tenant is a lane of its own)
  with due work in turn, least recently served first, handing out their due jobs round by round — each
  org's first, then each one's second — until the batch is full, so an org with one job waiting takes
  one slot and the busy org the rest, and a lone org still gets whole batches; what the lanes leave is
  filled in the queue's own order.
- Priority, then run time, still orders the jobs within one org.
- A lane whose work is delayed takes its turn when that work falls due; a retried job brings its lane
  back; nothing in a fair queue is ever left unclaimed.
"""

from __future__ import annotations

from collections import Counter

from ..contracts.jobs import NackOptions
from ..contracts.protocol import JobDriver
from .clock import FrozenClock
from .conformance_support import claim, request

FAIR = "conformance-fair"
"""The queue these scenarios declare fair."""


def fair(driver: JobDriver) -> JobDriver:
    """``driver`` with :data:`FAIR` among its fair queues."""
    driver.fair_queues = frozenset({*driver.fair_queues, FAIR})
    return driver


def backlog(driver: JobDriver, org: str | None, n: int, *, queue: str = FAIR, **fields: object) -> list[str]:
    """``n`` jobs of ``org`` in ``queue``, in one batch; answers their ids in enqueue order."""
    answers = driver.enqueue_many([request(queue=queue, tenant_id=org, **fields) for _ in range(n)])  # type: ignore[arg-type]
    return [a.id for a in answers]


def orgs_of(driver: JobDriver, limit: int, *, queue: str = FAIR) -> list[str | None]:
    """One claim of ``limit`` from ``queue``: the org of each job it took, in the order handed out."""
    return [job.tenant_id for job in claim(driver, queues=(queue,), limit=limit)]


class FairnessContract:
    """Fair claiming across orgs within a queue (``driver.fair_queues``)."""

    def test_a_driver_names_no_fair_queue_unless_told(self, driver: JobDriver) -> None:
        assert driver.fair_queues == frozenset()

    def test_without_fairness_a_noisy_orgs_backlog_comes_first(self, driver: JobDriver) -> None:
        backlog(driver, "org-a", 20, queue="plain")
        backlog(driver, "org-b", 1, queue="plain")
        assert orgs_of(driver, 5, queue="plain") == ["org-a"] * 5

    def test_a_quiet_orgs_job_is_in_the_next_claim_behind_a_noisy_backlog(self, driver: JobDriver) -> None:
        fair(driver)
        backlog(driver, "org-a", 30)
        [quiet] = backlog(driver, "org-b", 1)
        taken = claim(driver, queues=(FAIR,), limit=5)
        assert quiet in [job.id for job in taken]
        assert Counter(job.tenant_id for job in taken) == {"org-a": 4, "org-b": 1}  # the rest filled from org A

    def test_each_claim_serves_every_waiting_org_its_share(self, driver: JobDriver, clock: FrozenClock) -> None:
        fair(driver)
        for org in ("org-a", "org-b", "org-c"):
            backlog(driver, org, 10)
        for _ in range(3):
            assert Counter(orgs_of(driver, 3)) == {"org-a": 1, "org-b": 1, "org-c": 1}
            clock.advance(1)
        assert Counter(orgs_of(driver, 6)) == {"org-a": 2, "org-b": 2, "org-c": 2}

    def test_orgs_beyond_one_batch_take_turns_least_recently_served_first(
        self, driver: JobDriver, clock: FrozenClock
    ) -> None:
        fair(driver)
        orgs = [f"org-{n:02d}" for n in range(6)]
        for org in orgs:
            backlog(driver, org, 3)
        served: list[str | None] = []
        for _ in range(3):  # 2 orgs per claim: every org once in 3 claims, none twice
            served += orgs_of(driver, 2)
            clock.advance(1)
        assert sorted(o for o in served if o is not None) == orgs

    def test_a_lone_org_gets_whole_batches(self, driver: JobDriver, clock: FrozenClock) -> None:
        fair(driver)
        ids = backlog(driver, "org-a", 12)
        first = [job.id for job in claim(driver, queues=(FAIR,), limit=5)]
        clock.advance(1)
        second = [job.id for job in claim(driver, queues=(FAIR,), limit=5)]
        assert first + second == ids[:10]  # in the org's own order

    def test_priority_orders_the_jobs_within_an_org(self, driver: JobDriver) -> None:
        fair(driver)
        backlog(driver, "org-a", 3, priority=0)
        [urgent] = backlog(driver, "org-a", 1, priority=10)
        backlog(driver, "org-b", 3)
        taken = claim(driver, queues=(FAIR,), limit=2)
        assert urgent in [job.id for job in taken]
        assert Counter(job.tenant_id for job in taken) == {"org-a": 1, "org-b": 1}

    def test_jobs_with_no_tenant_are_a_lane_of_their_own(self, driver: JobDriver) -> None:
        fair(driver)
        backlog(driver, "org-a", 10)
        backlog(driver, None, 1)
        assert Counter(orgs_of(driver, 2)) == {"org-a": 1, None: 1}

    def test_a_delayed_job_takes_its_orgs_turn_once_due(self, driver: JobDriver, clock: FrozenClock) -> None:
        fair(driver)
        backlog(driver, "org-a", 30)
        [later] = backlog(driver, "org-b", 1, run_at_ms=clock.now_ms() + 1_000)
        assert orgs_of(driver, 3) == ["org-a"] * 3
        clock.advance(1_000)
        assert later in [job.id for job in claim(driver, queues=(FAIR,), limit=3)]

    def test_a_retried_job_brings_its_org_back(self, driver: JobDriver, clock: FrozenClock) -> None:
        fair(driver)
        [job_b] = backlog(driver, "org-b", 1)
        backlog(driver, "org-a", 30)
        taken = {job.id: job for job in claim(driver, queues=(FAIR,), limit=2)}
        assert job_b in taken
        clock.advance(1)
        assert orgs_of(driver, 2) == ["org-a"] * 2  # org B has nothing due: org A fills the batch
        assert driver.nack(job_b, taken[job_b].ref, NackOptions(error="boom", run_at_ms=clock.now_ms() + 500))
        clock.advance(500)
        assert job_b in [job.id for job in claim(driver, queues=(FAIR,), limit=2)]

    def test_every_job_of_a_fair_queue_is_claimed_once(self, driver: JobDriver, clock: FrozenClock) -> None:
        fair(driver)
        ids = set(backlog(driver, "org-a", 40))
        for n in range(10):
            ids |= set(backlog(driver, f"org-{n}", n % 3 + 1, priority=n % 2))
        ids |= set(backlog(driver, None, 3))
        seen: list[str] = []
        while True:
            got = claim(driver, queues=(FAIR,), limit=7)
            if not got:
                break
            seen += [job.id for job in got]
            clock.advance(1)
        assert len(seen) == len(set(seen)) and set(seen) == ids

    def test_jobs_enqueued_before_the_queue_was_fair_are_still_claimed(
        self, driver: JobDriver, clock: FrozenClock
    ) -> None:
        before = set(backlog(driver, "org-a", 3))
        fair(driver)
        after = set(backlog(driver, "org-b", 2))
        taken = {job.id for job in claim(driver, queues=(FAIR,), limit=10)}
        assert taken == before | after

    def test_a_claim_of_fair_and_plain_queues_serves_both(self, driver: JobDriver) -> None:
        fair(driver)
        backlog(driver, "org-a", 5)
        plain = set(backlog(driver, "org-a", 5, queue="plain"))
        [quiet] = backlog(driver, "org-b", 1)
        got = driver.claim(queues=[FAIR, "plain"], limit=10, worker_id="w1", queue_limits={FAIR: 3, "plain": 2})
        ids = {job.id for job in got.jobs}
        assert quiet in ids and len(ids & plain) == 2 and len(ids) == 5
