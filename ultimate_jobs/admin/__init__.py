"""The Django admin over ultimate_jobs: the dashboard (settles over time, the queues, what needs attention),
jobs, dead letters, queues, workers, tasks, the outbox, the backfill ledger and the webhook ledger.
Read-only by default — no row is added, changed or deleted
through a form; what an operator may do is an action, allowed by the model's change permission, carried out through
``ultimate_jobs.operator`` and recorded in Django's admin log. See docs/operating.md, "Admin"."""

from .backfills import BackfillAdmin
from .dashboard import DashboardAdmin
from .fleet import QueueAdmin, TaskAdmin, WorkerAdmin
from .jobs import DeadLetterAdmin, JobAdmin
from .outbox import OutboxAdmin
from .webhooks import WebhookDeliveryAdmin, WebhookEndpointStateAdmin

__all__ = [
    "BackfillAdmin",
    "DashboardAdmin",
    "DeadLetterAdmin",
    "JobAdmin",
    "OutboxAdmin",
    "QueueAdmin",
    "TaskAdmin",
    "WebhookDeliveryAdmin",
    "WebhookEndpointStateAdmin",
    "WorkerAdmin",
]
