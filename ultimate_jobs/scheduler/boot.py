"""Build the scheduler role from ``settings.ULTIMATE_JOBS`` (what ``jobs_scheduler`` and ``jobs_dev`` run)."""

from __future__ import annotations

from ..conf import job_clock, job_driver, jobs_settings
from ..durations import Duration
from .leader import DEFAULT_LEASE_TTL_MS, Leader, memory_leader, postgres_lease_leader
from .runtime import TICK_INTERVAL_MS, JobScheduler, job_scheduler
from .state import SchedulerState, memory_scheduler_state, postgres_scheduler_state


def scheduler_from_settings(
    *,
    lease_ttl: Duration | None = None,
    tick_interval: Duration | None = None,
    drain_deadline: Duration | None = None,
) -> JobScheduler:
    """A scheduler over the configured driver: on the Postgres driver, the durable pair — a lease row
    (``postgres_lease_leader``) and stored watermarks (``postgres_scheduler_state``) on the driver's own
    database, so the fire is one statement; on any other driver, the in-memory pair (one process:
    ``jobs_dev`` and tests).

    >>> scheduler_from_settings(lease_ttl="30s").run()     # blocks; SIGTERM drains
    """
    config = jobs_settings()
    driver = job_driver()
    clock = job_clock()
    ttl = lease_ttl if lease_ttl is not None else DEFAULT_LEASE_TTL_MS
    leader: Leader
    state: SchedulerState
    executor = getattr(driver, "executor", None)
    if driver.name == "postgres" and executor is not None:
        leader = postgres_lease_leader(executor, ttl=ttl, clock=clock)
        state = postgres_scheduler_state(executor)
    else:
        leader = memory_leader(ttl=ttl, clock=clock)
        state = memory_scheduler_state()
    return job_scheduler(
        driver=driver,
        leader=leader,
        state=state,
        clock=clock,
        tick_interval=tick_interval if tick_interval is not None else TICK_INTERVAL_MS,
        drain_deadline=drain_deadline if drain_deadline is not None else config.drain_deadline_ms,
    )
