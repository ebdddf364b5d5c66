"""The scheduler role: ``@task`` declarations, the catch-up policies, the leader, and the dispatch loop
over the driver's stored watermarks (``driver.scheduler_state``) and lease (``driver.leader``)."""

from ..contracts.protocol import SchedulerStore
from ..contracts.schedules import Fire, FireResult
from .leader import DEFAULT_LEASE_TTL_MS, Leader, LeaseLeader, MemoryLeader, lease_leader, memory_leader
from .runtime import PAUSE_RECHECK_MS, TICK_INTERVAL_MS, JobScheduler, SchedulerStats, job_scheduler
from .task import DEFAULT_MAX_CATCH_UP, TaskDescriptor, TaskHandle, next_task_run, task

__all__ = [
    "DEFAULT_LEASE_TTL_MS",
    "DEFAULT_MAX_CATCH_UP",
    "PAUSE_RECHECK_MS",
    "TICK_INTERVAL_MS",
    "Fire",
    "FireResult",
    "JobScheduler",
    "Leader",
    "LeaseLeader",
    "MemoryLeader",
    "SchedulerStats",
    "SchedulerStore",
    "TaskDescriptor",
    "TaskHandle",
    "job_scheduler",
    "lease_leader",
    "memory_leader",
    "next_task_run",
    "task",
]
