"""The scheduler role: ``@task`` declarations, the catch-up policies, the leader lease, the stored
watermarks and the dispatch loop."""

from .leader import (
    DEFAULT_LEASE_TTL_MS,
    Leader,
    MemoryLeader,
    MemoryLease,
    PostgresLeaseLeader,
    memory_leader,
    postgres_lease_leader,
)
from .runtime import PAUSE_RECHECK_MS, TICK_INTERVAL_MS, JobScheduler, SchedulerStats, job_scheduler
from .state import (
    Fire,
    FireResult,
    MemorySchedulerState,
    PostgresSchedulerState,
    SchedulerState,
    memory_scheduler_state,
    postgres_scheduler_state,
)
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
    "MemoryLeader",
    "MemoryLease",
    "MemorySchedulerState",
    "PostgresLeaseLeader",
    "PostgresSchedulerState",
    "SchedulerState",
    "SchedulerStats",
    "TaskDescriptor",
    "TaskHandle",
    "job_scheduler",
    "memory_leader",
    "memory_scheduler_state",
    "next_task_run",
    "postgres_lease_leader",
    "postgres_scheduler_state",
    "task",
]
