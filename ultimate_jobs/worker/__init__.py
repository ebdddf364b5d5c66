"""The worker role: per-queue pools, lease heartbeat, deadlines, limits and the two-phase drain."""

from ..runtime.polling import IDLE_POLL_CEILING_MS, WOKEN_IDLE_POLL_CEILING_MS
from .build import JOBS_CONCURRENCY_DEFAULT, POLL_INTERVAL_MS, job_worker
from .runtime import JobWorker, WorkerStats

__all__ = [
    "IDLE_POLL_CEILING_MS",
    "JOBS_CONCURRENCY_DEFAULT",
    "POLL_INTERVAL_MS",
    "WOKEN_IDLE_POLL_CEILING_MS",
    "JobWorker",
    "WorkerStats",
    "job_worker",
]
