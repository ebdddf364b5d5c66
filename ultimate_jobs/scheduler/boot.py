"""Build the scheduler role from ``settings.ULTIMATE_JOBS`` (what ``jobs_scheduler`` and ``jobs_dev`` run)."""

from __future__ import annotations

from ..conf import jobs_settings
from ..core.durations import Duration
from ..core.installed import job_clock, job_driver
from .leader import DEFAULT_LEASE_TTL_MS, lease_leader
from .runtime import TICK_INTERVAL_MS, JobScheduler, job_scheduler


def scheduler_from_settings(
    *,
    lease_ttl: Duration | None = None,
    tick_interval: Duration | None = None,
    drain_deadline: Duration | None = None,
) -> JobScheduler:
    """A scheduler over the configured driver, on that driver's own lease (``driver.leader``) and
    watermarks (``driver.scheduler_state``): on Postgres a lease row and stored watermarks in the jobs
    database, so the fire is one statement; on the memory driver, both in this process (``jobs_dev``).

    >>> scheduler_from_settings(lease_ttl="30s").run()     # blocks; SIGTERM drains
    """
    config = jobs_settings()
    driver = job_driver()
    clock = job_clock()
    return job_scheduler(
        driver=driver,
        leader=lease_leader(driver, ttl=lease_ttl if lease_ttl is not None else DEFAULT_LEASE_TTL_MS, clock=clock),
        clock=clock,
        tick_interval=tick_interval if tick_interval is not None else TICK_INTERVAL_MS,
        drain_deadline=drain_deadline if drain_deadline is not None else config.drain_deadline_ms,
    )
