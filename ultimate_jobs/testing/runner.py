"""``run_jobs()``: drive a queue in-process until it is idle, advancing a frozen clock through sleeps,
backoffs and event polls. The same executor the worker uses runs every attempt — an ``async def`` body
on an :class:`~ultimate_jobs.runtime.async_lane.AsyncLane` of the call's own, whose driver calls and
Django ORM calls run back on the calling thread (so a test's transaction is the one they see)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..contracts.jobs import ClaimedJob, ExhaustedJob, JobState
from ..contracts.operator import MAX_JOB_PAGE, JobFilter, JobRecord
from ..contracts.ordering import job_cursor
from ..contracts.protocol import JobDriver
from ..core.execute import (
    AttemptEnv,
    JobExecution,
    announce_exhausted,
    drop_exhausted_names,
    execute_job,
    execute_job_async,
    find_handle,
)
from ..core.installed import job_clock, job_driver
from ..runtime.async_lane import AsyncLane
from .clock import FrozenClock

WAITING_STATES: tuple[JobState, ...] = ("ready", "delayed", "suspended")
DEFAULT_HORIZON_MS = 90 * 86_400_000


@dataclass(slots=True)
class RunReport:
    """What ``run_jobs`` did: every attempt in order, and the rows the claim buried."""

    executions: list[JobExecution] = field(default_factory=list)
    exhausted: list[ExhaustedJob] = field(default_factory=list)

    @property
    def outcomes(self) -> Counter[str]:
        """How many attempts ended each way (``None`` outcomes — handed back — count as ``handed-back``)."""
        return Counter(e.outcome or "handed-back" for e in self.executions)

    def last(self, job_id: str) -> JobExecution | None:
        """The last attempt of one job."""
        for execution in reversed(self.executions):
            if execution.job_id == job_id:
                return execution
        return None


def _queues() -> list[str]:
    from ..worker.build import default_queues

    return default_queues()


def _rows(driver: JobDriver, **filters: Any) -> Iterator[JobRecord]:
    """Every row matching ``filters``, page by page."""
    operator_store = driver.operator
    if operator_store is None:
        return
    after: str | None = None
    while True:
        page = operator_store.list(JobFilter(limit=MAX_JOB_PAGE, after=after, **filters))
        yield from page.rows
        if page.is_last:
            return
        after = job_cursor(page.rows[-1])


def _next_due(driver: JobDriver, queues: Sequence[str], now: int) -> int | None:
    """The earliest instant after ``now`` at which a waiting row falls due or a running lease lapses."""
    candidates = [
        row.run_at_ms
        for state in WAITING_STATES
        for queue in queues
        for row in _rows(driver, state=state, queue=queue)
        if row.run_at_ms > now
    ]
    candidates += [
        row.lease_until_ms
        for row in _rows(driver, state="running")
        if row.lease_until_ms is not None and row.lease_until_ms > now
    ]
    return min(candidates, default=None)


def run_jobs(
    driver: JobDriver | None = None,
    *,
    clock: FrozenClock | None = None,
    queues: Sequence[str] | None = None,
    context: Callable[[], Any] | None = None,
    advance: bool | None = None,
    horizon_ms: int = DEFAULT_HORIZON_MS,
    max_attempts: int = 10_000,
    worker_id: str = "run-jobs",
    batch: int = 8,
    seed: int = 0,
) -> RunReport:
    """Claim and execute every due job until the queue is idle; with a frozen clock (``advance`` left
    ``None``, or ``True``) jump the clock to the next waiting row and keep going, up to ``horizon_ms``
    ahead. On the real clock (no ``FrozenClock`` installed: a Django ``TestCase`` on the configured
    driver) it runs the jobs that are due now and returns.

    Attempts run one at a time, in claim order, ``async def`` bodies too: each is awaited on one
    :class:`~ultimate_jobs.runtime.async_lane.AsyncLane` the call starts when it meets the first and
    stops before it returns, and everything such an attempt does synchronously — the driver's settles,
    the body's Django ORM (``await Order.objects.aget(...)``, ``sync_to_async``) — runs on the calling
    thread, on its connection. Call it from sync code (in an async test: ``await
    sync_to_async(run_jobs)()``).

    >>> clock = FrozenClock(); driver = MemoryDriver(clock=clock); set_job_driver(driver); set_job_clock(clock)
    >>> onboard_org.enqueue({"org_id": "org-1"})
    >>> report = run_jobs(driver, clock=clock)
    >>> report.outcomes["completed"]
    1
    """
    driver = driver or job_driver()
    active_clock = clock or job_clock()
    if advance is None:  # a frozen clock is jumped to the next waiting row; real time runs what is due
        advance = isinstance(active_clock, FrozenClock)
    if advance and not isinstance(active_clock, FrozenClock):
        raise TypeError("run_jobs(advance=True) needs a FrozenClock; pass clock= or advance=False")
    names = list(queues) if queues is not None else _queues()
    stop_at = active_clock.now_ms() + horizon_ms
    report = RunReport()
    drop = drop_exhausted_names()
    env = AttemptEnv(driver=driver, clock=active_clock, context=context, rng=random.Random(seed))

    attempts = _Attempts(env, worker_id)
    try:
        while len(report.executions) < max_attempts:
            claimed = driver.claim(queues=names, limit=batch, worker_id=worker_id, drop_exhausted=drop)
            if claimed.buried:
                report.exhausted.extend(claimed.buried)
                announce_exhausted(claimed.buried, context=context)
            if claimed.jobs:
                for job in claimed.jobs:
                    report.executions.append(attempts.run(job))
                continue
            if not advance:
                break
            assert isinstance(active_clock, FrozenClock)
            now = active_clock.now_ms()
            due = _next_due(driver, names, now)
            if due is None or due > stop_at:
                break
            active_clock.set(due)
    finally:
        attempts.close()
    return report


class _Attempts:
    """How ``run_jobs`` runs one attempt: a sync body in line, an async one on the call's lane."""

    def __init__(self, env: AttemptEnv, worker_id: str) -> None:
        self._env = env
        self._name = f"{worker_id}-async"
        self._lane: AsyncLane | None = None

    def run(self, job: ClaimedJob) -> JobExecution:
        handle = find_handle(job)
        if handle is None or not handle.is_async:
            return execute_job(job, self._env, handle=handle)
        if self._lane is None:
            self._lane = AsyncLane(name=self._name, offload_threads=1)
        lane = self._lane
        return lane.run_here(lambda: execute_job_async(job, self._env, lane=lane, handle=handle))

    def close(self) -> None:
        if self._lane is not None:
            self._lane.stop(wait=False)
