"""The operator surface: what ``manage.py jobs``, the admin and the JSON views read — and nothing else.

Every function takes the driver as a keyword (default: the process's ``job_driver()``) and answers a
frozen record whose ``as_dict()`` is its stable ``--json`` shape (:mod:`.records`). Every operator
capability is a member of the driver's ``operator``; on a driver without one, these functions are
``X_NOT_IMPLEMENTED`` — except :func:`cancel_job`, which answers ``X_JOB_NOT_CANCELLABLE``
there, and :func:`inspect_queues`, which reads the driver's own ``stats()``.

>>> from ultimate_jobs import operator
>>> operator.inspect_job(job_id).steps
>>> operator.retry_job(job_id, from_step="charge")
>>> operator.requeue_many(state="dead", queue="payments", until_done=True)

Secrets never leave in clear: a job's input fields typed ``SecretStr``/``SecretBytes``/``Secret[T]``
are stored sealed (:mod:`ultimate_jobs.guards.sealing`), and every record here carries them as
``"**********"`` — and scrubs their values out of errors, step outputs and progress notes
(:mod:`ultimate_jobs.guards.redaction`).

Called from inside a run (outside ``cross_tenant()``), the surface answers for the run's org only
(:mod:`ultimate_jobs.guards.org_boundary`): a job of another org is ``X_TENANCY_ACTOR_MISMATCH``, lists and
bulk actions hold the run's org's jobs, and the views over every org (queues, stats, workers, tasks, the
outbox, the backfill ledger, pauses) are refused. The CLI, the admin and the JSON views run outside any
run, where none of this applies.
"""

from ..contracts.ordering import JobCount
from .backfills import BackfillRow, inspect_backfills
from .dashboard import (
    AttentionItem,
    DashboardView,
    DepthPoint,
    QueueDepths,
    QueueWaits,
    SeriesPoint,
    WaitPoint,
    inspect_dashboard,
)
from .jobs import (
    BulkProgress,
    cancel_job,
    count_jobs,
    inspect_dead_letters,
    inspect_job,
    list_jobs,
    promote_job,
    promote_many,
    remove_job,
    remove_many,
    requeue_many,
    retry_from_step,
    retry_job,
)
from .lookup import resolve_job_id
from .outbox import OutboxActionResult, OutboxView, inspect_outbox, remove_outbox_rows, retry_outbox_rows
from .queues import inspect_queues, inspect_stats, inspect_workers, passes_in_flight, pause_queue, resume_queue
from .rates import inspect_rates
from .records import (
    BulkOutcome,
    ErrorDetail,
    JobActionResult,
    JobDetail,
    JobPageView,
    JobRow,
    JobTotals,
    Manifest,
    PauseState,
    QueueRow,
    RateRow,
    StatsView,
    StepRow,
    TaskRow,
    WorkerRow,
)
from .tasks import (
    MANIFEST_FILE,
    inspect_manifest,
    inspect_tasks,
    manifest_json,
    pause_task,
    resume_task,
    write_manifest,
)

__all__ = [
    "MANIFEST_FILE",
    "AttentionItem",
    "BackfillRow",
    "BulkOutcome",
    "BulkProgress",
    "DashboardView",
    "DepthPoint",
    "ErrorDetail",
    "JobActionResult",
    "JobCount",
    "JobDetail",
    "JobPageView",
    "JobRow",
    "JobTotals",
    "Manifest",
    "OutboxActionResult",
    "OutboxView",
    "PauseState",
    "QueueDepths",
    "QueueRow",
    "QueueWaits",
    "RateRow",
    "SeriesPoint",
    "StatsView",
    "StepRow",
    "TaskRow",
    "WaitPoint",
    "WorkerRow",
    "cancel_job",
    "count_jobs",
    "inspect_backfills",
    "inspect_dashboard",
    "inspect_dead_letters",
    "inspect_job",
    "inspect_manifest",
    "inspect_outbox",
    "inspect_queues",
    "inspect_rates",
    "inspect_stats",
    "inspect_tasks",
    "inspect_workers",
    "list_jobs",
    "manifest_json",
    "passes_in_flight",
    "pause_queue",
    "pause_task",
    "promote_job",
    "promote_many",
    "remove_job",
    "remove_many",
    "remove_outbox_rows",
    "requeue_many",
    "resolve_job_id",
    "resume_queue",
    "resume_task",
    "retry_from_step",
    "retry_job",
    "retry_outbox_rows",
    "write_manifest",
]
