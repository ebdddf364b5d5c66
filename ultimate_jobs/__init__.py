"""ultimate_jobs — durable background work for Django.

>>> from ultimate_jobs import job, JobRun
>>> @job(idempotency_key=lambda i: f"welcome:{i['user_id']}", tenant="none")
... def send_welcome(run: JobRun) -> None:
...     run.step.run("send", lambda: mail.send(run.input["user_id"]))
>>> send_welcome.enqueue({"user_id": 7})
"""

from .contracts.jobs import ClaimedJob, ClaimRef, Enqueued, JobOutcome, JobState, NackOptions, nack_state
from .contracts.protocol import JobDriver
from .core.clock import Clock, SystemClock, system_clock
from .core.declare import job
from .core.definition import Concurrency, JobDescriptor, JobHandle
from .core.execute import AttemptEnv, JobExecution, Settled, execute_job, job_lease_key
from .core.installed import job_clock, job_driver, set_job_clock, set_job_driver
from .core.rates import RateLimit
from .core.retry import RetryPolicy, is_final_attempt, retry_schedule
from .core.routing import set_jobs_router
from .core.run import JobRun
from .core.scope import Actor, cross_tenant
from .core.signals import CancelSignal, current_signal
from .core.steps import Step, StepSuspension
from .errors import UltimateError, register_error_retry
from .events import postgres_event_bus, publish_event, reset_event_bus, set_event_bus
from .features.backfills import DEFAULT_BACKFILL_RATE, backfill, is_backfill, pending_backfills, registered_backfills
from .features.exports import export_part_key, export_rows
from .features.purge import DEFAULT_PURGE_CRON, PurgeTarget, events_purge_target, purge
from .guards.limits import LimitConfig
from .outbox import install_outbox, outbox_relay
from .scheduler import JobScheduler, TaskHandle, job_scheduler, lease_leader, next_task_run, task
from .webhooks import (
    WebhookLedger,
    django_webhook_ledger,
    memory_webhook_ledger,
    verify_webhook_signature,
    webhook,
    webhook_receiver,
)
from .worker import JobWorker, job_worker

__version__ = "0.1.0"
"""This package's version: the wheel's (setup.cfg reads it here) and what ``--version`` prints."""

cron_task = task
"""``@cron_task(cron=..., tz=...)``: the clearer name of :func:`task` (the same function) — a cron
schedule that enqueues jobs, not Django's ``django.tasks.task`` (a background function)."""


def __getattr__(name: str) -> object:
    """``TenantScopedModel``/``TenantScopedQuerySet`` import Django models, so they load on first use
    (an app's package must not import models before the app registry is ready)."""
    if name in ("TenantScopedModel", "TenantScopedQuerySet"):
        from .guards import tenancy

        return getattr(tenancy, name)
    raise AttributeError(f"module 'ultimate_jobs' has no attribute {name!r}")


__all__ = [
    "DEFAULT_BACKFILL_RATE",
    "DEFAULT_PURGE_CRON",
    "Actor",
    "AttemptEnv",
    "CancelSignal",
    "ClaimRef",
    "ClaimedJob",
    "Clock",
    "Concurrency",
    "Enqueued",
    "JobDescriptor",
    "JobDriver",
    "JobExecution",
    "JobHandle",
    "JobOutcome",
    "JobRun",
    "JobScheduler",
    "JobState",
    "JobWorker",
    "LimitConfig",
    "NackOptions",
    "PurgeTarget",
    "RateLimit",
    "RetryPolicy",
    "Settled",
    "Step",
    "StepSuspension",
    "SystemClock",
    "TaskHandle",
    "TenantScopedModel",
    "TenantScopedQuerySet",
    "UltimateError",
    "WebhookLedger",
    "backfill",
    "cron_task",
    "cross_tenant",
    "current_signal",
    "django_webhook_ledger",
    "events_purge_target",
    "execute_job",
    "export_part_key",
    "export_rows",
    "install_outbox",
    "is_backfill",
    "is_final_attempt",
    "job",
    "job_clock",
    "job_driver",
    "job_lease_key",
    "job_scheduler",
    "job_worker",
    "lease_leader",
    "memory_webhook_ledger",
    "nack_state",
    "next_task_run",
    "outbox_relay",
    "pending_backfills",
    "postgres_event_bus",
    "publish_event",
    "purge",
    "register_error_retry",
    "registered_backfills",
    "reset_event_bus",
    "retry_schedule",
    "set_event_bus",
    "set_job_clock",
    "set_job_driver",
    "set_jobs_router",
    "system_clock",
    "task",
    "verify_webhook_signature",
    "webhook",
    "webhook_receiver",
]
