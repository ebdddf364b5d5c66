"""Every error ultimate_jobs raises, each with its stable code, and the retry classification table.

Across a process or job boundary the class is gone and the code is what survives, so match on
``err.code``. The executor reads :func:`retry_class` to decide what a thrown error does to a job.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Literal

RetryClass = Literal["terminal", "retry-after", "retryable"]
"""How the executor treats a code: dead-letter now, retry at a named time, or follow the backoff."""


class UltimateError(Exception):
    """The base of every ultimate_jobs error: a stable ``code``, a message saying what to do, ``meta``.

    >>> raise UltimateError("X_INVOICE_REJECTED", "the gateway refused the card", {"invoice": 7})
    """

    default_code = "X_ULTIMATE"

    def __init__(self, code: str | None = None, message: str = "", meta: Mapping[str, Any] | None = None):
        self.code = code or self.default_code
        self.message = message or self.code
        self.meta: dict[str, Any] = dict(meta or {})
        super().__init__(f"{self.code}: {self.message}")

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape every surface prints: ``{"code", "message", "meta"}``."""
        return {"code": self.code, "message": self.message, "meta": self.meta}


class CodedError(UltimateError):
    """An error whose class fixes its code: raise it with a message (and meta) only."""

    def __init__(self, message: str = "", meta: Mapping[str, Any] | None = None) -> None:
        super().__init__(self.default_code, message, meta)


# One class per error, each with its stable code string. Classes that share a code
# (JobDuplicateError / JobNameTakenError) stay distinct for ``isinstance`` inside one process.
class AsyncUnsupportedError(CodedError):
    """An ``async def`` (or an object or partial that calls one) handed where nothing awaits it — the key and
    tenant functions, ``concurrency.key``, the context factory, ``cross_tenant``, a signal's callback, a
    factory's callable — or an async generator function anywhere (a body, a step, ``on_settled`` may be
    ``async def``). Write a plain def or wrap it in ``asgiref.sync.async_to_sync``."""

    default_code = "X_JOB_ASYNC_UNSUPPORTED"


class BackfillAppliedError(CodedError):
    """``jobs_backfill NAME --write`` named a backfill whose pass already completed, without ``--force``."""

    default_code = "X_BACKFILL_APPLIED"


class BackfillEnvironmentError(CodedError):
    """A backfill's pass ran in a deployment its ``environments=`` does not name."""

    default_code = "X_BACKFILL_ENVIRONMENT"


class BackfillMigrationPendingError(CodedError):
    """The migration a backfill's ``requires=`` names is not applied to this database."""

    default_code = "X_BACKFILL_MIGRATION_PENDING"


class BackfillPendingError(CodedError):
    """``jobs_backfill --pending`` found declared backfills with no completed pass (the deploy check's
    verdict: it exits 1 and reports this code)."""

    default_code = "X_BACKFILL_PENDING"


class BackfillRunningError(CodedError):
    """``jobs_backfill NAME --write --force`` while a pass of that backfill is live: the enqueue joined the
    live pass (its idempotency key is the name), so nothing sweeps again."""

    default_code = "X_BACKFILL_RUNNING"


class BackfillStalledError(CodedError):
    """A backfill's source ran out while its ``count()`` still matched rows: two predicates disagree."""

    default_code = "X_BACKFILL_STALLED"


class BackfillUnknownError(CodedError):
    """``jobs_backfill`` named a backfill this process does not declare."""

    default_code = "X_BACKFILL_UNKNOWN"


class CancelUnsupportedError(CodedError):
    """The driver has no cancel."""

    default_code = "X_JOB_NOT_CANCELLABLE"


class ClaimQueuesEmptyError(CodedError):
    """A claim named no queue."""

    default_code = "X_JOB_CLAIM_QUEUES_EMPTY"


class ConcurrencyUnenforceableError(CodedError):
    """A job declares concurrency, or a queue is capped per org (``LIMITS["FLEET_PER_TENANT"]``), and the
    driver has no lease store."""

    default_code = "X_JOB_CONCURRENCY_UNENFORCEABLE"


class RateLimitUnenforceableError(ConcurrencyUnenforceableError):
    """A job declares a rate limit and the driver keeps no rate schedules (``driver.rates`` is None)."""

    default_code = "X_JOB_RATE_LIMIT_UNENFORCEABLE"


class DriverUnavailableError(CodedError):
    """No driver is configured or reachable."""

    default_code = "X_DRIVER_UNAVAILABLE"


class IdempotencyRequiredError(CodedError):
    """A job was declared without idempotency_key."""

    default_code = "X_IDEMPOTENCY_REQUIRED"


class JobAbortedError(CodedError):
    """A cancelled attempt tried to write a step."""

    default_code = "X_ABORTED"


class JobBodyExitedError(CodedError):
    """A job's code raised a ``BaseException`` that is not an ``Exception`` — ``sys.exit()``
    (``SystemExit``), ``KeyboardInterrupt`` off the main thread, ``GeneratorExit``, an
    ``asyncio.CancelledError`` that was not the run's own cancel. The attempt fails with this code (the
    original is its ``__cause__``; ``meta["raised"]`` names its class), the retry policy applies, and the
    worker's slot runs the next job."""

    default_code = "X_JOB_BODY_EXITED"

    @classmethod
    def of(cls, job: str, raised: BaseException) -> JobBodyExitedError:
        """The failure of ``job``'s attempt whose code raised ``raised``, chained to it."""
        kind = type(raised)
        path = f"{kind.__module__}.{kind.__qualname__}"
        error = cls(
            f"{job}: the job raised {path}({', '.join(map(repr, raised.args))}), which is not an Exception; the "
            "attempt failed and the retry policy applies. A job fails by raising an Exception: do not call "
            "sys.exit() in job code, and catch what a library raises on its way out",
            {"job": job, "raised": path},
        )
        error.__cause__ = raised
        return error


class JobConcurrencyInvalidError(CodedError):
    """The declared concurrency cannot be honoured."""

    default_code = "X_JOB_DECLARATION_INVALID"


class JobConcurrencyKeyInvalidError(CodedError):
    """concurrency.key answered an empty, non-string or over-long key."""

    default_code = "X_JOB_DECLARATION_INVALID"


class JobRateLimitInvalidError(CodedError):
    """A rate limit that says no rate: ``"ten per second"``, a count below 1, a period of nothing, faster than
    1,000 a second for one key, a ``rate_key`` that is no function or comes without a ``rate_limit``."""

    default_code = "X_JOB_RATE_LIMIT_INVALID"


class JobRateKeyInvalidError(CodedError):
    """``rate_key(input)`` raised, or answered no non-empty string of at most 200 characters."""

    default_code = "X_JOB_RATE_KEY_INVALID"


class JobDeclarationInvalidError(CodedError):
    """job() is missing a required field or declares an invalid one."""

    default_code = "X_JOB_DECLARATION_INVALID"


class JobDrainedError(CodedError):
    """The worker is draining; the attempt is handed back uncounted."""

    default_code = "X_DRAINING"


class JobDuplicateError(CodedError):
    """An enqueue collided with a live key under on_conflict='error', or its explicit id names a job of
    another tenant (the refusal then says nothing of that job)."""

    default_code = "X_JOB_DUPLICATE"


class JobKeyBusyError(CodedError):
    """The concurrency key held its limit of runs under when_busy='fail'."""

    default_code = "X_JOB_KEY_BUSY"


class JobMaxAttemptsError(CodedError):
    """Retries exhausted; the job was dead-lettered."""

    default_code = "X_JOB_MAX_ATTEMPTS"


class JobNameTakenError(CodedError):
    """Two different handles claim one durable job name."""

    default_code = "X_JOB_DUPLICATE"


class JobNotCancellableError(CodedError):
    """The job is not live (done, failed, dead, cancelled or unknown)."""

    default_code = "X_JOB_NOT_CANCELLABLE"


class JobNotFoundError(CodedError):
    """No queue holds that job id."""

    default_code = "X_JOB_NOT_FOUND"


class JobNotPromotableError(CodedError):
    """The job is not waiting on its run time."""

    default_code = "X_JOB_NOT_PROMOTABLE"


class JobNotRemovableError(CodedError):
    """The job is running; cancel it first."""

    default_code = "X_JOB_NOT_REMOVABLE"


class JobNotRequeueableError(CodedError):
    """Only a finished job can be requeued."""

    default_code = "X_JOB_NOT_REQUEUEABLE"


class JobOnSettledFailedError(CodedError):
    """on_settled threw on every try; logged, never thrown."""

    default_code = "X_JOB_ON_SETTLED_FAILED"


class JobPageInvalidError(CodedError):
    """A page limit over MAX_JOB_PAGE or a cursor no page produced."""

    default_code = "X_JOB_PAGE_INVALID"


class JobRowStatusUnknownError(CodedError):
    """A stored row carries a state this version does not know."""

    default_code = "X_JOB_ROW_STATUS_UNKNOWN"


class JobSecretUnreadableError(CodedError):
    """A sealed secret opens with none of the site's keys: add the old key to SECRET_KEY_FALLBACKS."""

    default_code = "X_JOB_SECRET_UNREADABLE"


class JobSlotLostError(CodedError):
    """The fleet concurrency slot this run held was taken by another worker."""

    default_code = "X_JOB_SLOT_LOST"


class JobTenantRequiredError(CodedError):
    """A job was declared without tenant."""

    default_code = "X_JOB_TENANT_REQUIRED"


class JobTenantMismatchError(CodedError):
    """The payload's org is not the org the run is under."""

    default_code = "X_JOB_TENANT_MISMATCH"


class JobTimeoutError(CodedError):
    """The job, a step or a required wait exceeded its timeout."""

    default_code = "X_JOB_TIMEOUT"


class LeaseLostError(CodedError):
    """The job was cancelled or its lease lapsed while this worker ran it."""

    default_code = "X_JOB_LEASE_LOST"


class OutboxNoTxError(CodedError):
    """enqueue outside a transaction with OUTBOX='required'."""

    default_code = "X_OUTBOX_NO_TX"


class StepDuplicateError(CodedError):
    """Two steps share a name in one run."""

    default_code = "X_STEP_DUPLICATE"


class StepAtomicUnsupportedError(CodedError):
    """``run.step.atomic()`` where its writes cannot commit with the step's checkpoint: a driver whose jobs
    live outside Django's databases (Redis, memory), ``using=`` another alias than the jobs', or an
    ``async def`` function (Django's transactions are synchronous)."""

    default_code = "X_STEP_ATOMIC_UNSUPPORTED"

    @classmethod
    def outside_django(cls, driver: str, step: str | None = None) -> StepAtomicUnsupportedError:
        """The refusal on a driver whose jobs live outside Django's databases."""
        return cls(
            f"run.step.atomic() needs the jobs in a Django database (the postgres or sqlite driver), so the "
            f"step's writes and its checkpoint commit in one transaction; the {driver!r} driver keeps them "
            "elsewhere — use run.step.run() with an idempotency key on the effect, or move the jobs to the "
            "postgres driver",
            {"driver": driver, **({"step": step} if step is not None else {})},
        )


class SchemaNotMigratedError(CodedError):
    """A role (``jobs_worker``, ``jobs_scheduler``, ``jobs_relay``, ``jobs_dev``) was started on a database
    that lacks ultimate_jobs migrations: its tables are missing or out of date. Run ``python manage.py
    migrate``, then start the role again."""

    default_code = "X_SCHEMA_NOT_MIGRATED"


class ExportPartTooLargeError(CodedError):
    """One page of an export encoded past ``max_part_bytes``: lower ``batch``."""

    default_code = "X_EXPORT_PART_TOO_LARGE"


class ExportRowInvalidError(CodedError):
    """``row()`` answered a key ``columns`` does not carry, no mapping, or a value no encoder writes."""

    default_code = "X_EXPORT_ROW_INVALID"


class WebhookDeliveryFailedError(CodedError):
    """A delivery the receiver did not accept (a 3xx, 408, 5xx) or that never got an answer: retried."""

    default_code = "X_WEBHOOK_DELIVERY_FAILED"


class WebhookDeliveryRejectedError(CodedError):
    """The receiver refused the delivery for good (a 4xx other than 408 and 429): dead-lettered."""

    default_code = "X_WEBHOOK_DELIVERY_REJECTED"


class WebhookDeliveryThrottledError(CodedError):
    """The receiver answered 429 or 503: retried after its Retry-After (``meta.retryAfterSeconds``)."""

    default_code = "X_WEBHOOK_DELIVERY_THROTTLED"


class WebhookEndpointDisabledError(CodedError):
    """The endpoint is disabled (its own flag or the ledger's): nothing is sent."""

    default_code = "X_WEBHOOK_ENDPOINT_DISABLED"


class WebhookEndpointInvalidError(CodedError):
    """``endpoint(input)`` answered no usable endpoint: no id, an URL that is not http(s), no secret, a bad header."""

    default_code = "X_WEBHOOK_ENDPOINT_INVALID"


class WebhookEndpointUnknownError(CodedError):
    """``endpoint(input)`` answered ``None``: no endpoint under that id."""

    default_code = "X_WEBHOOK_ENDPOINT_UNKNOWN"


class WebhookEventInvalidError(CodedError):
    """An event that cannot be sent: an id or topic empty, too long, or holding ``:`` or a control character; a
    body that is not bytes, text or JSON."""

    default_code = "X_WEBHOOK_EVENT_INVALID"


class WebhookEventUnknownError(CodedError):
    """``event(input)`` answered ``None``: no event under that id."""

    default_code = "X_WEBHOOK_EVENT_UNKNOWN"


class WebhookSignatureInvalidError(CodedError):
    """A received delivery whose signature does not verify: missing, malformed, stale, or not this secret's mac."""

    default_code = "X_WEBHOOK_SIGNATURE_INVALID"


class NotImplementedOnDriverError(CodedError):
    """The driver has no operator store."""

    default_code = "X_NOT_IMPLEMENTED"


class InvariantError(CodedError):
    """A value broke an invariant the caller must keep (core's code)."""

    default_code = "X_INVARIANT"


class ValidationError(CodedError):
    """A job input failed its declared model (core's code)."""

    default_code = "X_VALIDATION"


class InputNotJsonError(ValidationError, TypeError):
    """A job's input, or a Django task's arguments, that JSON cannot hold (a datetime, a set, an object).
    A ``TypeError`` as well, as Django's task API raises for such arguments, so ``except TypeError`` around
    ``task.enqueue(...)`` catches it on this backend as on Django's own."""


class JobRequestInvalidError(CodedError):
    """An enqueue request no driver can store: a NUL byte in its text, input nested too deep, a run_at
    outside the schedulable instants, a run_id that is not a UUID, a blank queue. Refused at the call,
    before any statement runs, so the caller's transaction is untouched."""

    default_code = "X_JOB_REQUEST_INVALID"


class TenancyActorMismatchError(CodedError):
    """A tenant-scoped row belongs to another org than the acting one; or, inside a run, an enqueue, a job
    or a task result is another org's, or an operator view spans every org."""

    default_code = "X_TENANCY_ACTOR_MISMATCH"


class TenancyActorOrgRequiredError(CodedError):
    """A tenant-scoped read, or an enqueue or a job read for an org, ran with no org (a tenant='none' run);
    wrap it in cross_tenant()."""

    default_code = "X_TENANCY_ACTOR_ORG_REQUIRED"


# The operator's refusals of input from outside (the CLI, the admin, the JSON views), raised before any
# statement runs (ultimate_jobs.operator.arguments).
class JobIdInvalidError(CodedError):
    """A job id that is not a UUID (a NUL byte, other text, too long): it can name no row."""

    default_code = "X_JOB_ID_INVALID"


class JobIdAmbiguousError(CodedError):
    """A part of an id given to ``jobs show``/``retry``/``cancel``/``promote``/``remove`` — a short id (an
    end of an id) or a start of one — that names more than one job."""

    default_code = "X_JOB_ID_AMBIGUOUS"


class JobArgumentInvalidError(CodedError):
    """An operator argument no row can hold or no command can use: a blank, NUL-bearing or over-long
    queue, task or step name or cancel reason, an action the page does not offer, a stats window over
    ten years, a manifest path that cannot be written, a metrics port that cannot be served."""

    default_code = "X_JOB_ARGUMENT_INVALID"


# ---------------------------------------------------------------------------------------------
# Retry classification: one table, read by the executor and by --json output.

_RETRY_LOCK = threading.Lock()
_RETRY: dict[str, RetryClass] = {
    "X_DRAINING": "retryable",
    "X_TIMEOUT": "retryable",
    "X_JOB_TIMEOUT": "retryable",
    "X_RATE_LIMITED": "retry-after",
    "X_OVERLOADED": "retry-after",
    "X_WEBHOOK_DELIVERY_THROTTLED": "retry-after",
    "X_WEBHOOK_DELIVERY_FAILED": "retryable",
    "X_JOB_KEY_BUSY": "terminal",
    "X_JOB_RATE_LIMIT_INVALID": "terminal",
    "X_JOB_RATE_KEY_INVALID": "terminal",
    "X_STEP_DUPLICATE": "terminal",
    "X_STEP_ATOMIC_UNSUPPORTED": "terminal",
    "X_JOB_TENANT_MISMATCH": "terminal",
    "X_JOB_SECRET_UNREADABLE": "terminal",
    "X_VALIDATION": "terminal",
    "X_JOB_REQUEST_INVALID": "terminal",
    "X_INVARIANT": "terminal",
    "X_JOB_DECLARATION_INVALID": "terminal",
    "X_JOB_ASYNC_UNSUPPORTED": "terminal",
    "X_TENANCY_ACTOR_MISMATCH": "terminal",
    "X_TENANCY_ACTOR_ORG_REQUIRED": "terminal",
    "X_WEBHOOK_DELIVERY_REJECTED": "terminal",
    "X_WEBHOOK_ENDPOINT_DISABLED": "terminal",
    "X_WEBHOOK_ENDPOINT_INVALID": "terminal",
    "X_WEBHOOK_ENDPOINT_UNKNOWN": "terminal",
    "X_WEBHOOK_EVENT_INVALID": "terminal",
    "X_WEBHOOK_EVENT_UNKNOWN": "terminal",
    "X_EXPORT_ROW_INVALID": "terminal",
    "X_EXPORT_PART_TOO_LARGE": "terminal",
    "X_BACKFILL_ENVIRONMENT": "terminal",
    "X_BACKFILL_STALLED": "terminal",
}
_VALID_CLASSES = ("terminal", "retry-after", "retryable")


def register_error_retry(table: Mapping[str, RetryClass]) -> None:
    """Classify your app's codes beside the module that declares them.

    >>> register_error_retry({"X_INVOICE_REJECTED": "terminal", "X_GATEWAY_BUSY": "retry-after"})

    A code nobody classified keeps the attempt-count path. An unknown class is ``X_INVARIANT``.
    """
    for code, cls in table.items():
        if not isinstance(code, str) or not code:
            raise InvariantError("register_error_retry: every key must be a non-empty code string", {"code": code})
        if cls not in _VALID_CLASSES:
            raise InvariantError(
                f"register_error_retry: {code!r} -> {cls!r}; use one of {', '.join(_VALID_CLASSES)}",
                {"code": code, "class": cls},
            )
    with _RETRY_LOCK:
        _RETRY.update(table)


def retry_class(error: BaseException) -> RetryClass | None:
    """The classification of a thrown error, or ``None`` when it is unclassified (not ours, or no row).

    Only an :class:`UltimateError` is read: a foreign exception that happens to carry a ``code``
    attribute (Django's ``ValidationError``, an HTTP client's status) keeps the backoff path.
    """
    code = code_of(error)
    if code is None:
        return None
    with _RETRY_LOCK:
        return _RETRY.get(code)


def retry_classes() -> dict[str, RetryClass]:
    """A copy of the whole table, as ``--json`` prints it."""
    with _RETRY_LOCK:
        return dict(_RETRY)


def retry_after_seconds_of(error: BaseException) -> float | None:
    """``meta.retryAfterSeconds`` (or ``retry_after_seconds``) when it is a positive number, else ``None``.

    Zero or a negative number is "unstated", exactly as a past HTTP date is.
    """
    meta = getattr(error, "meta", None)
    if not isinstance(meta, Mapping):
        return None
    value = meta.get("retryAfterSeconds", meta.get("retry_after_seconds"))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


def code_of(error: BaseException | None) -> str | None:
    """The ``code`` an error carries, or ``None`` for a foreign exception (even one with a ``code`` attribute)."""
    if not isinstance(error, UltimateError):
        return None
    return error.code if isinstance(error.code, str) else None
