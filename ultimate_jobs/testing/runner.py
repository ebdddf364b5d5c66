"""``run_jobs()``: drive a queue in-process until it is idle, advancing a frozen clock through sleeps,
backoffs and event polls. The same executor the worker uses runs every attempt."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.execute import AttemptEnv, JobExecution, announce_exhausted, drop_exhausted_names, execute_job
from ..core.installed import job_clock, job_driver
from ..drivers.protocol import JobDriver
from ..drivers.records import MAX_JOB_PAGE, ExhaustedJob, JobFilter, JobRecord, JobState, job_cursor
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

    while len(report.executions) < max_attempts:
        claimed = driver.claim(queues=names, limit=batch, worker_id=worker_id, drop_exhausted=drop)
        if claimed.buried:
            report.exhausted.extend(claimed.buried)
            announce_exhausted(claimed.buried, context=context)
        if claimed.jobs:
            for job in claimed.jobs:
                report.executions.append(execute_job(job, env))
            continue
        if not advance:
            break
        assert isinstance(active_clock, FrozenClock)
        now = active_clock.now_ms()
        due = _next_due(driver, names, now)
        if due is None or due > stop_at:
            break
        active_clock.set(due)
    return report
