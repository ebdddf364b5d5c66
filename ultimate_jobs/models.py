"""The tables, one model each, ``db_table`` set to the durable table names (``x_jobs``, ``x_outbox``, …).
Migrations are the one schema truth; the SQL drivers read and write them through their ``SQL_*`` constants
(``ultimate_jobs.drivers.postgres.queries``, ``ultimate_jobs.drivers.sqlite.queries``); the admin reads and acts
through ``ultimate_jobs.operator``, the models giving its pages their place and permissions. Nothing
else may write these tables behind the driver's back."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce

LIVE = ("ready", "delayed", "running", "suspended")
FINISHED = ("done", "failed", "dead", "cancelled")
STATE_CHOICES = [(s, s) for s in ("ready", "delayed", "running", "suspended", "done", "failed", "dead", "cancelled")]


class Job(models.Model):
    """``x_jobs``: one row per job run, live or finished."""

    id = models.UUIDField(primary_key=True)
    run_id = models.UUIDField()
    name = models.TextField()
    queue = models.TextField()
    tenant_id = models.TextField(null=True)
    idempotency_key = models.TextField()
    input = models.JSONField()
    state = models.TextField(choices=STATE_CHOICES)
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField()
    priority = models.IntegerField(default=0)
    run_at = models.DateTimeField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
    worker_id = models.TextField(null=True)
    claim = models.UUIDField(null=True)
    lease_until = models.DateTimeField(null=True)
    last_error = models.TextField(null=True)
    last_code = models.TextField(null=True)
    progress = models.JSONField(null=True)
    enqueued_by = models.TextField(null=True)
    traceparent = models.TextField(null=True)
    concurrency_key = models.TextField(null=True)
    lane = models.TextField(null=True)
    """The row's lane in a fair queue (its tenant, ``""`` for none), set at enqueue when its queue is in
    ``FAIR_QUEUES``; ``NULL`` in every other queue. ``x_jobs_turn`` keeps ``x_job_turns`` from it."""

    class Meta:
        db_table = "x_jobs"
        constraints = [
            models.UniqueConstraint(
                F("name"),
                Coalesce("tenant_id", Value("")),
                F("idempotency_key"),
                condition=Q(state__in=LIVE),
                name="x_jobs_name_tenant_idempotency_live_idx",
            ),
            models.CheckConstraint(condition=Q(state__in=[s for s, _ in STATE_CHOICES]), name="x_jobs_state_check"),
        ]
        indexes = [
            # SQL_CLAIM's first arm: due rows of one queue in claim order; finished rows cost nothing.
            models.Index(
                F("queue"),
                F("priority").desc(),
                F("run_at"),
                F("id"),
                condition=Q(state__in=("ready", "delayed", "suspended")),
                name="x_jobs_claim_idx",
            ),
            # SQL_CLAIM_FAIR's lane arm: one lane's due rows in claim order (fair queues' rows only).
            models.Index(
                F("queue"),
                F("lane"),
                F("priority").desc(),
                F("run_at"),
                F("id"),
                condition=Q(lane__isnull=False, state__in=("ready", "delayed", "suspended")),
                name="x_jobs_lane_idx",
            ),
            # SQL_CLAIM_FAIR's retirement: when a lane's first waiting row falls due.
            models.Index(
                F("queue"),
                F("lane"),
                F("run_at"),
                condition=Q(lane__isnull=False, state__in=("ready", "delayed", "suspended")),
                name="x_jobs_lane_run_at_idx",
            ),
            # SQL_CLAIM's second arm: running rows whose lease lapsed.
            models.Index(F("lease_until"), condition=Q(state="running"), name="x_jobs_lease_idx"),
            # list(): newest first, by queue/state filters.
            models.Index(F("created_at").desc(), F("id").desc(), name="x_jobs_created_idx"),
            # list() by state and queue; SQL_STATS's counts and SQL_PURGE_FINISHED's ranges (state leads it).
            models.Index(F("state"), F("queue"), F("created_at"), name="x_jobs_state_queue_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.id} ({self.state})"


class JobTurn(models.Model):
    """``x_job_turns``: one row per lane (an org) of a fair queue — the rotation its claims serve.

    ``turn_at`` is when the lane last took its turn, or joined the rotation: a claim serves the lanes with
    the oldest first and stamps the ones it served with its own time. ``NULL`` while the lane has nothing
    due, with ``wake_at`` the run time of its first waiting row (``NULL``: none). The ``x_jobs_turn``
    trigger files a lane when a row of it becomes waiting; the claim retires a lane it found empty."""

    id = models.BigAutoField(primary_key=True)
    queue = models.TextField()
    lane = models.TextField()
    turn_at = models.DateTimeField(null=True)
    wake_at = models.DateTimeField(null=True)

    class Meta:
        db_table = "x_job_turns"
        constraints = [models.UniqueConstraint(fields=["queue", "lane"], name="x_job_turns_queue_lane_uniq")]
        indexes = [
            models.Index(F("queue"), F("turn_at"), condition=Q(turn_at__isnull=False), name="x_job_turns_turn_idx"),
            models.Index(
                F("queue"),
                F("wake_at"),
                condition=Q(turn_at__isnull=True, wake_at__isnull=False),
                name="x_job_turns_wake_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.lane or '(no tenant)'}"


class RateSchedule(models.Model):
    """``x_job_rates``: one row per rate key (``@job(rate_limit=...)``): the next instant a start may take,
    in epoch ms — the generic cell rate algorithm's theoretical arrival time."""

    key = models.TextField(primary_key=True)
    next_at_ms = models.BigIntegerField()

    class Meta:
        db_table = "x_job_rates"
        verbose_name = "rate limit"

    def __str__(self) -> str:
        return self.key


class RateHold(models.Model):
    """``x_job_rate_holds``: the instant reserved for a run that found its rate key busy, until it comes
    back to start on it."""

    id = models.BigAutoField(primary_key=True)
    key = models.TextField()
    holder = models.TextField()
    at_ms = models.BigIntegerField()

    class Meta:
        db_table = "x_job_rate_holds"
        constraints = [models.UniqueConstraint(fields=["key", "holder"], name="x_job_rate_holds_key_holder_uniq")]
        indexes = [models.Index(fields=["at_ms"], name="x_job_rate_holds_at_idx")]

    def __str__(self) -> str:
        return f"{self.key} {self.holder}"


class JobStep(models.Model):
    """``x_job_steps``: one row per persisted step of a job (deleted with the job by the driver)."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.UUIDField()
    name = models.TextField()
    seq = models.IntegerField()
    status = models.TextField()
    output = models.JSONField(null=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
    wake_at = models.DateTimeField(null=True)
    meta = models.JSONField(default=dict)

    class Meta:
        db_table = "x_job_steps"
        constraints = [models.UniqueConstraint(fields=["job_id", "name"], name="x_job_steps_job_name_uniq")]
        indexes = [models.Index(fields=["job_id", "seq"], name="x_job_steps_job_seq_idx")]


class JobLease(models.Model):
    """``x_job_leases``: one row per held fleet-concurrency slot, lapsing at ``expires_at``."""

    id = models.BigAutoField(primary_key=True)
    key = models.TextField()
    holder = models.TextField()
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "x_job_leases"
        constraints = [models.UniqueConstraint(fields=["key", "holder"], name="x_job_leases_key_holder_uniq")]
        indexes = [models.Index(fields=["key", "expires_at"], name="x_job_leases_key_idx")]


class JobCounter(models.Model):
    """``x_job_counters``: settles per job per bucket — by outcome, their summed run time and a count per run-time
    bin — moved in the statement that settles the row."""

    id = models.BigAutoField(primary_key=True)
    job = models.TextField()
    width_ms = models.IntegerField()
    bucket = models.DateTimeField()
    done = models.IntegerField(default=0)
    retried = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    dead = models.IntegerField(default=0)
    duration_ms = models.BigIntegerField(default=0)
    # the settles of runs by run time: run_bin_<i> counts bin i of contracts.series.WAIT_EDGES_MS (under 10 ms,
    # 10-50 ms, … an hour or more), for the run-time percentiles
    run_bin_0 = models.IntegerField(default=0, db_default=0)
    run_bin_1 = models.IntegerField(default=0, db_default=0)
    run_bin_2 = models.IntegerField(default=0, db_default=0)
    run_bin_3 = models.IntegerField(default=0, db_default=0)
    run_bin_4 = models.IntegerField(default=0, db_default=0)
    run_bin_5 = models.IntegerField(default=0, db_default=0)
    run_bin_6 = models.IntegerField(default=0, db_default=0)
    run_bin_7 = models.IntegerField(default=0, db_default=0)
    run_bin_8 = models.IntegerField(default=0, db_default=0)
    run_bin_9 = models.IntegerField(default=0, db_default=0)
    run_bin_10 = models.IntegerField(default=0, db_default=0)
    run_bin_11 = models.IntegerField(default=0, db_default=0)
    run_bin_12 = models.IntegerField(default=0, db_default=0)
    run_bin_13 = models.IntegerField(default=0, db_default=0)
    run_bin_14 = models.IntegerField(default=0, db_default=0)

    class Meta:
        db_table = "x_job_counters"
        constraints = [models.UniqueConstraint(fields=["job", "width_ms", "bucket"], name="x_job_counters_bucket_uniq")]


class JobWait(models.Model):
    """``x_job_waits``: per queue and bucket, how many attempts started after waiting how long from their row's
    run time — one row per histogram bin (``contracts.series.WAIT_EDGES_MS``), moved in the statement that
    settles the attempt and folded through the counter tiers as ``x_job_counters`` is."""

    id = models.BigAutoField(primary_key=True)
    queue = models.TextField()
    width_ms = models.IntegerField()
    bucket = models.DateTimeField()
    bin = models.SmallIntegerField()
    count = models.IntegerField(default=0)

    class Meta:
        db_table = "x_job_waits"
        constraints = [
            models.UniqueConstraint(fields=["queue", "width_ms", "bucket", "bin"], name="x_job_waits_bucket_uniq")
        ]


class QueueDepthSample(models.Model):
    """``x_job_queue_samples``: per minute and queue, the most rows waiting and the oldest due row's age the
    counter rollup saw (``queue`` ``""``: the minute was sampled), kept a week (``contracts.series.SAMPLE_KEEP_MS``)."""

    id = models.BigAutoField(primary_key=True)
    bucket = models.DateTimeField()
    queue = models.TextField()
    depth = models.IntegerField(default=0)
    oldest_age_ms = models.BigIntegerField(null=True)

    class Meta:
        db_table = "x_job_queue_samples"
        constraints = [models.UniqueConstraint(fields=["bucket", "queue"], name="x_job_queue_samples_uniq")]


class Worker(models.Model):
    """``x_workers``: the live worker registry, a row per worker renewed by its heartbeat."""

    id = models.TextField(primary_key=True)
    host = models.TextField()
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    queues = models.JSONField()
    slots = models.IntegerField()
    in_flight = models.JSONField()
    heartbeat_at = models.DateTimeField()

    class Meta:
        db_table = "x_workers"


class PausedQueue(models.Model):
    """``x_job_paused_queues``: a paused queue is a row the claim reads."""

    queue = models.TextField(primary_key=True)
    paused_at = models.DateTimeField()

    class Meta:
        db_table = "x_job_paused_queues"


class PausedTask(models.Model):
    """``x_job_paused_tasks``: a paused task is a row the scheduler reads when it is due."""

    task = models.TextField(primary_key=True)
    paused_at = models.DateTimeField()

    class Meta:
        db_table = "x_job_paused_tasks"


class TaskFire(models.Model):
    """``x_job_task_fires``: per task, the last occurrence that dispatched."""

    task = models.TextField(primary_key=True)
    occurrence_at = models.DateTimeField()
    fired_at = models.DateTimeField()

    class Meta:
        db_table = "x_job_task_fires"


class OutboxRow(models.Model):
    """``x_outbox``: one staged enqueue, written in the caller's transaction and published by a relay.

    The row id IS the job id the publish uses, and ``run_id`` the job's run id, both allocated at stage
    time. ``request`` is the whole enqueue request. ``claimed_at``/``claimed_by`` are a relay's claim
    (a lease); ``published_at`` set means published — the row stays as the audit trail. ``failed_at`` set
    means a publish failed with an error retrying cannot fix: the row is set aside (``last_error`` says
    why) so the rows behind it publish, until an operator retries or removes it.
    """

    id = models.UUIDField(primary_key=True)
    run_id = models.UUIDField()
    name = models.TextField()
    queue = models.TextField()
    request = models.JSONField()
    staged_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True)
    claimed_by = models.TextField(null=True)
    published_at = models.DateTimeField(null=True)
    failed_at = models.DateTimeField(null=True)
    last_error = models.TextField(null=True)

    class Meta:
        db_table = "x_outbox"
        verbose_name = "outbox row"
        verbose_name_plural = "outbox"
        indexes = [
            # SQL_OUTBOX_CLAIM walks it in claim order; SQL_OUTBOX_STAGE's throttle and the stats read it.
            # Published and set-aside rows leave it, so neither the audit trail nor a failed row costs the claim.
            models.Index(
                F("staged_at"),
                F("id"),
                condition=Q(published_at__isnull=True, failed_at__isnull=True),
                name="x_outbox_pending_idx",
            ),
            # SQL_OUTBOX_FAILED and the operator's retry/remove: the rows a permanent error set aside.
            models.Index(
                F("staged_at"),
                F("id"),
                condition=Q(published_at__isnull=True, failed_at__isnull=False),
                name="x_outbox_failed_idx",
            ),
            # SQL_OUTBOX_PURGE_PUBLISHED: the audit trail, oldest published first (retention).
            models.Index(F("published_at"), condition=Q(published_at__isnull=False), name="x_outbox_published_idx"),
        ]

    def __str__(self) -> str:
        return f"outbox {self.name} {self.id}"


class JobEvent(models.Model):
    """``x_job_events``: one row per published event, matchable by ``step.wait_for_event`` until it
    expires. Stamped with the DATABASE's clock (the event bus has one clock)."""

    id = models.UUIDField(primary_key=True)
    event = models.TextField()
    data = models.JSONField()
    published_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "x_job_events"
        indexes = [
            # SQL_EVENT_FIND: the oldest matching event of one name published since a wait began.
            models.Index(fields=["event", "published_at"], name="x_job_events_event_idx"),
            # SQL_EVENT_PURGE: expired rows, oldest first.
            models.Index(fields=["expires_at"], name="x_job_events_expires_idx"),
        ]


class SchedulerLease(models.Model):
    """``x_job_scheduler_leases``: the scheduler's leader lease — a row with an expiry, one per election."""

    name = models.TextField(primary_key=True)
    holder = models.TextField()
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "x_job_scheduler_leases"


class TaskWatermark(models.Model):
    """``x_job_task_watermarks``: per task, the last occurrence the scheduler dealt with (fired or passed
    over). A fire moves it only from the value the firing scheduler read — the fence against a second fire."""

    task = models.TextField(primary_key=True)
    watermark = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "x_job_task_watermarks"


BACKFILL_STATUS_CHOICES = [(s, s) for s in ("running", "completed", "failed")]


class Backfill(models.Model):
    """``x_backfills``: the backfill ledger, one row per pass — the twin of a migrations table. The pass
    writes it through ``driver.backfills``; every surface reads it through ``operator.inspect_backfills``."""

    id = models.UUIDField(primary_key=True)
    name = models.TextField()
    tenant_id = models.TextField(null=True)
    checksum = models.TextField()
    status = models.TextField(choices=BACKFILL_STATUS_CHOICES)
    app_version = models.TextField(null=True)
    rows_processed = models.BigIntegerField(default=0)
    batches = models.IntegerField(default=0)
    last_cursor = models.JSONField(null=True)
    job_id = models.UUIDField()
    run_id = models.UUIDField(unique=True)  # SQL_BACKFILL_BEGIN: a retry adopts its run's row
    error_code = models.TextField(null=True)
    started_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True)

    class Meta:
        db_table = "x_backfills"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s for s, _ in BACKFILL_STATUS_CHOICES]), name="x_backfills_status_check"
            ),
        ]
        indexes = [
            # SQL_BACKFILL_COMPLETED and SQL_BACKFILL_LIST by name: one name's passes, newest first.
            models.Index(fields=["name", "-started_at"], name="x_backfills_name_idx"),
        ]


class WebhookEndpointState(models.Model):
    """``x_webhook_endpoints``: what the ready-made webhook ledger (``django_webhook_ledger()``) knows of one
    endpoint — its consecutive failures and, once ``disable_after`` is reached, when it was disabled. Only
    the app re-enables an endpoint (``ledger.enable(endpoint_id)``)."""

    endpoint_id = models.CharField(max_length=200, primary_key=True)
    consecutive_failures = models.IntegerField(default=0)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.TextField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "x_webhook_endpoints"
        verbose_name = "webhook endpoint"
        verbose_name_plural = "webhook endpoints"

    def __str__(self) -> str:
        return f"webhook endpoint {self.endpoint_id}"


class WebhookDelivery(models.Model):
    """``x_webhook_deliveries``: one row per delivery attempt the ready-made webhook ledger recorded —
    the response status or the failure's code, and the endpoint's consecutive-failure count after it."""

    id = models.BigAutoField(primary_key=True)
    endpoint_id = models.CharField(max_length=200)
    event_id = models.CharField(max_length=200)
    topic = models.CharField(max_length=200)
    tenant_id = models.TextField(null=True, blank=True)
    job_id = models.TextField()
    run_id = models.TextField()
    attempt = models.IntegerField()
    url = models.TextField()
    status_code = models.IntegerField(null=True, blank=True)
    ok = models.BooleanField()
    error_code = models.TextField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    duration_ms = models.IntegerField()
    consecutive_failures = models.IntegerField()
    created_at = models.DateTimeField()

    class Meta:
        db_table = "x_webhook_deliveries"
        verbose_name = "webhook delivery"
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # one endpoint's deliveries, newest first (the admin's filter, an app's own history page)
            models.Index(fields=["endpoint_id", "-created_at"], name="x_webhook_deliv_endpoint_idx"),
            models.Index(fields=["-created_at"], name="x_webhook_deliv_created_idx"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.event_id} to {self.endpoint_id} (attempt {self.attempt})"


# -- admin pages -------------------------------------------------------------------------------------
# Proxy models: no table of their own. Each gives an admin page its place in the index and its own
# view/change permissions; the pages read and act through ``ultimate_jobs.operator`` (admin/).


class DeadLetterManager(models.Manager["DeadLetter"]):
    """Only the rows of the dead-letter queue (``state = 'dead'``, through ``x_jobs_state_queue_idx``)."""

    def get_queryset(self) -> models.QuerySet[DeadLetter]:
        return super().get_queryset().filter(state="dead")


class DeadLetter(Job):
    """The dead-letter queue: ``x_jobs`` rows in state ``dead``, retried whole or from a step."""

    objects: ClassVar[DeadLetterManager] = DeadLetterManager()

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"


class Queue(PausedQueue):
    """The queues overview (``operator.inspect_queues``): depth, oldest due row, pause and resume.
    An instance names a queue in the admin log; it is never saved."""

    class Meta:
        proxy = True
        verbose_name = "queue"
        verbose_name_plural = "queues"

    def __str__(self) -> str:
        return f"queue {self.queue}"


class ScheduledTask(PausedTask):
    """The tasks page (``operator.inspect_tasks``): cron, tz, next run, last fire, pause and resume.
    An instance names a task in the admin log; it is never saved."""

    class Meta:
        proxy = True
        verbose_name = "task"
        verbose_name_plural = "tasks"

    def __str__(self) -> str:
        return f"task {self.task}"


class Dashboard(JobCounter):
    """The dashboard page (``operator.inspect_dashboard``): settles per outcome and mean run time over the
    last hour, day or week, the queues now and what needs attention — read from ``x_job_counters``. Never
    saved; its permissions say who may open the page."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
