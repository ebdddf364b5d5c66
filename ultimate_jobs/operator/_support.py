"""What every operator function shares: resolving the driver and its operator store, and turning driver
records into redacted operator records."""

from __future__ import annotations

from collections.abc import Iterable

from ..contracts.jobs import Progress, StepRecord
from ..contracts.operator import JobRecord
from ..contracts.protocol import JobDriver, OperatorStore
from ..core.installed import job_driver
from ..errors import JobNotFoundError, NotImplementedOnDriverError
from ..guards.org_boundary import check_job_org, guarded
from ..guards.redaction import redact, scrub, secret_values
from .records import ErrorDetail, JobRow, StepRow


def resolve(driver: JobDriver | None) -> JobDriver:
    """``driver``, or the process's driver (``job_driver()``)."""
    return driver if driver is not None else job_driver()


def require_operator(driver: JobDriver, capability: str) -> OperatorStore:
    """``driver.operator``, or ``X_NOT_IMPLEMENTED`` naming what needed it."""
    surface = driver.operator
    if surface is None:
        raise NotImplementedOnDriverError(
            f"{capability} needs the operator surface, and the {driver.name!r} "
            "driver has no operator store. Fix: give the driver an operator store, or run it against one of the "
            "built-in drivers (postgres, sqlite, redis, memory)",
            {"driver": driver.name, "capability": capability},
        )
    return surface


def confine_job(surface: OperatorStore, job_id: str) -> None:
    """Inside a run, refuse acting on a job of another org (``X_TENANCY_ACTOR_MISMATCH``) before the action
    runs: one read of the row there, none outside a run. An id no queue holds is the action's to report."""
    if not guarded():
        return
    record = surface.get(job_id)
    if record is not None:
        check_job_org(record.tenant_id, job_id=job_id)


def not_found(job_id: str) -> JobNotFoundError:
    """``X_JOB_NOT_FOUND`` for an id no queue holds."""
    return JobNotFoundError(
        f"no queue holds job {job_id!r}. Fix: python manage.py jobs list --json", {"job_id": job_id}
    )


class Redactor:
    """Redacts rows of any job, whether this process declares it or not: a sealed secret shows as the
    mask wherever it stands, and the clear values of the input's secrets are scrubbed out of the free
    text (:mod:`ultimate_jobs.guards.redaction`) — the row says where its secrets are, not the registry."""

    def secrets(self, record: JobRecord) -> set[str]:
        """The clear values of ``record``'s secret input fields."""
        return secret_values(record.input)

    def row(self, record: JobRecord, secrets: Iterable[str] | None = None) -> JobRow:
        """``record`` as a :class:`JobRow`: input masked, free text scrubbed of the secrets' values."""
        found = self.secrets(record) if secrets is None else set(secrets)
        return JobRow(
            id=record.id,
            run_id=record.run_id,
            name=record.name,
            queue=record.queue,
            state=record.state,
            tenant_id=record.tenant_id,
            idempotency_key=scrub(record.idempotency_key, found),
            attempts=record.attempts,
            max_attempts=record.max_attempts,
            priority=record.priority,
            run_at_ms=record.run_at_ms,
            created_at_ms=record.created_at_ms,
            updated_at_ms=record.updated_at_ms,
            finished_at_ms=record.finished_at_ms,
            input=redact(dict(record.input)),
            last_code=record.last_code,
            last_error=scrub(headline(record.last_error), found),
            progress=_progress(record.progress, found),
            worker_id=record.worker_id,
            lease_until_ms=record.lease_until_ms,
            enqueued_by=record.enqueued_by,
            traceparent=record.traceparent,
            concurrency_key=scrub(record.concurrency_key, found),
        )


def headline(text: str | None) -> str | None:
    """The first line of an error text."""
    return None if text is None else text.split("\n", 1)[0]


def error_detail(record: JobRecord, secrets: Iterable[str]) -> ErrorDetail | None:
    """The last error split into its first line and the rest (the stack and any verdict), scrubbed."""
    if record.last_error is None and record.last_code is None:
        return None
    text = scrub(record.last_error or "", secrets)
    message, _, stack = text.partition("\n")
    return ErrorDetail(code=record.last_code, message=message, stack=stack or None)


def step_row(step: StepRecord, secrets: Iterable[str]) -> StepRow:
    """One step of the trace: a sealed output masked, output and meta scrubbed of the run's secret values."""
    return StepRow(
        name=step.name,
        seq=step.seq,
        status=step.status,
        started_at_ms=step.started_at_ms,
        finished_at_ms=step.finished_at_ms,
        wake_at_ms=step.wake_at_ms,
        output=scrub(redact(step.output), secrets),
        meta=scrub(dict(step.meta), secrets),
    )


def _progress(progress: Progress | None, secrets: Iterable[str]) -> Progress | None:
    if progress is None or progress.note is None:
        return progress
    return Progress(done=progress.done, total=progress.total, note=scrub(progress.note, secrets), at_ms=progress.at_ms)
