"""The operator surface over job rows: list, inspect, and the actions on one job or a set of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from ..contracts.jobs import LIVE_STATES, JobState
from ..contracts.operator import DEFAULT_JOB_PAGE, MAX_JOB_PAGE, BulkFilter, BulkResult, JobFilter
from ..contracts.ordering import DEFAULT_JOB_ORDER, JobCount, JobOrder, job_cursor
from ..contracts.protocol import BackfillStore, JobDriver
from ..errors import CancelUnsupportedError, JobNotCancellableError
from ..features.backfills import registered_backfills
from ..guards.org_boundary import check_job_org, confine_tenant_filter
from ._support import Redactor, confine_job, error_detail, not_found, require_operator, resolve, step_row
from .arguments import check_job_id, check_name, check_reason
from .backfills import BackfillRow
from .records import BulkAction, BulkOutcome, JobActionResult, JobDetail, JobPageView

BulkProgress = Callable[[BulkOutcome], None]
"""Told after every call of a looping bulk action, with the totals so far."""


def list_jobs(
    *,
    queue: str | None = None,
    name: str | None = None,
    state: JobState | None = None,
    tenant_id: str | None = None,
    id_prefix: str | None = None,
    id_suffix: str | None = None,
    idempotency_key: str | None = None,
    created_from_ms: int | None = None,
    created_to_ms: int | None = None,
    limit: int = DEFAULT_JOB_PAGE,
    after: str | None = None,
    before: str | None = None,
    order: JobOrder = DEFAULT_JOB_ORDER,
    driver: JobDriver | None = None,
) -> JobPageView:
    """One page of jobs in ``order`` (newest first by default), inputs redacted. ``after=page.next`` pages
    on, ``before=page.previous`` back; ``created_to_ms`` is exclusive; ``id_prefix`` is the start of an
    id's canonical text (lowercase, dashed), ``id_suffix`` its end (a short id: every row is read),
    ``idempotency_key`` an exact key.

    >>> page = list_jobs(state="dead", name="charge_order", limit=50)
    >>> older = list_jobs(state="dead", name="charge_order", limit=50, after=page.next)
    >>> most_tried = list_jobs(state="dead", order="-attempts", limit=50)

    ``order`` is ``created``, ``run_at``, ``finished``, ``attempts``, ``name`` or ``queue``, descending with a
    leading ``-``. Sorted by creation, every matching row is in order; sorted by another column, the newest
    ``COUNT_CAP`` (10,000) matching rows are, and ``page.window`` says so when more match (narrow the
    filter to sort them all). Sorted by ``finished``, the page holds finished jobs only.

    A limit over ``MAX_JOB_PAGE`` (200), both cursors, a cursor no page produced (or one of another order)
    or an unknown order is ``X_JOB_PAGE_INVALID``. Inside a run the page holds the run's org's jobs only (a
    ``tenant_id`` of another org is ``X_TENANCY_ACTOR_MISMATCH``; see :mod:`ultimate_jobs.guards.org_boundary`).
    """
    tenant_id = confine_tenant_filter(tenant_id, what="list_jobs")
    surface = require_operator(resolve(driver), "list")
    flt = JobFilter(
        queue=queue,
        name=name,
        state=state,
        tenant_id=tenant_id,
        id_prefix=id_prefix,
        id_suffix=id_suffix,
        idempotency_key=idempotency_key,
        created_from_ms=created_from_ms,
        created_to_ms=created_to_ms,
        limit=limit,
        after=after,
        before=before,
        order=order,
    )
    page = surface.list(flt)
    redactor = Redactor()
    rows = tuple(redactor.row(r) for r in page.rows)
    short = len(rows) < page.limit
    # Paging newer (before=): a short page means nothing newer is left, and older rows always exist.
    older_exhausted = short and before is None
    newer_exhausted = (short and before is not None) or (after is None and before is None)
    return JobPageView(
        rows=rows,
        limit=page.limit,
        next=job_cursor(page.rows[-1], order) if rows and not older_exhausted else None,
        previous=job_cursor(page.rows[0], order) if rows and not newer_exhausted else None,
        order=order,
        window=page.window,
    )


def count_jobs(
    *,
    queue: str | None = None,
    name: str | None = None,
    state: JobState | None = None,
    tenant_id: str | None = None,
    id_prefix: str | None = None,
    idempotency_key: str | None = None,
    created_from_ms: int | None = None,
    created_to_ms: int | None = None,
    finished_only: bool = False,
    driver: JobDriver | None = None,
) -> JobCount:
    """How many jobs ``list_jobs`` with the same filters matches (``finished_only``: as sorted by finished).
    Exact when at most ``COUNT_CAP`` (10,000) rows match — counting reads no more; over that an estimate
    labelled by its ``basis`` (``"planner"`` on Postgres, ``"sample"`` on Redis) or ``"bound"`` (more than
    10,000), so the cost does not grow with the table. ``count.text()`` says it as a page shows it.

    >>> count_jobs(state="dead").text()
    '12'
    >>> count_jobs().text()
    'about 1,204,000 (estimated from the planner's statistics)'

    Bad filters are refused as ``list_jobs`` refuses them; inside a run only the run's org's jobs count.
    """
    tenant_id = confine_tenant_filter(tenant_id, what="count_jobs")
    surface = require_operator(resolve(driver), "count")
    flt = JobFilter(
        queue=queue,
        name=name,
        state=state,
        tenant_id=tenant_id,
        id_prefix=id_prefix,
        idempotency_key=idempotency_key,
        created_from_ms=created_from_ms,
        created_to_ms=created_to_ms,
        order="-finished" if finished_only else DEFAULT_JOB_ORDER,
    )
    return surface.count(flt)


def inspect_dead_letters(
    *,
    queue: str | None = None,
    name: str | None = None,
    tenant_id: str | None = None,
    limit: int = DEFAULT_JOB_PAGE,
    after: str | None = None,
    driver: JobDriver | None = None,
) -> JobPageView:
    """One page of the dead-letter queue (``state="dead"``), newest first.

    >>> for row in inspect_dead_letters(queue="payments").rows:
    ...     print(row.id, row.last_code)
    """
    return list_jobs(queue=queue, name=name, state="dead", tenant_id=tenant_id, limit=limit, after=after, driver=driver)


def inspect_job(job_id: str, *, driver: JobDriver | None = None) -> JobDetail:
    """One job with its per-step trace, redacted input, the failure's stack, its last progress and, for a
    backfill's pass, its ledger row (``backfill``). An id
    no queue holds is ``X_JOB_NOT_FOUND``; text that is no UUID, ``X_JOB_ID_INVALID`` (so for every
    action below).

    >>> detail = inspect_job(job_id)
    >>> [(s.name, s.status) for s in detail.steps], detail.error.code if detail.error else None
    """
    job_id = check_job_id(job_id)
    surface = require_operator(resolve(driver), "inspect_job")
    record = surface.get(job_id)
    if record is None:
        raise not_found(job_id)
    check_job_org(record.tenant_id, job_id=job_id)
    redactor = Redactor()
    secrets = redactor.secrets(record)
    return JobDetail(
        job=redactor.row(record, secrets),
        steps=tuple(step_row(s, secrets) for s in surface.steps(job_id)),
        error=error_detail(record, secrets),
        backfill=_ledger_row(resolve(driver), record.name, record.run_id),
    )


def _ledger_row(driver: JobDriver, name: str, run_id: str) -> BackfillRow | None:
    """The ledger row of the pass ``run_id`` ran, among the newest passes of ``name`` (one read over
    ``x_backfills_name_idx``); ``None`` for a job that ran no backfill, or on a driver without a ledger."""
    store: BackfillStore | None = driver.backfills
    if store is None:
        return None
    found = next((r for r in store.list(name=name, limit=MAX_JOB_PAGE) if r.run_id == run_id), None)
    if found is None:
        return None
    return BackfillRow(run=found, declared=any(d.name == name for d in registered_backfills()))


def retry_job(job_id: str, *, from_step: str | None = None, driver: JobDriver | None = None) -> JobActionResult:
    """Re-queue one finished job (done, failed, dead or cancelled) from its first attempt; with
    ``from_step``, that step and every step that started after it run again, earlier ones replay.

    >>> retry_job(job_id)                        # a dead letter, back on its queue
    >>> retry_job(job_id, from_step="charge")    # "provision" replays, "charge" runs again

    A live job is ``X_JOB_NOT_REQUEUEABLE``; a key a live job now holds is ``X_JOB_DUPLICATE``; an
    unknown id, or a step the run never started, is ``X_JOB_NOT_FOUND``; a blank step name (or one with a
    NUL byte) ``X_JOB_ARGUMENT_INVALID``.
    """
    job_id = check_job_id(job_id)
    from_step = None if from_step is None else check_name(from_step, what="step")
    surface = require_operator(resolve(driver), "retry")
    confine_job(surface, job_id)
    record = surface.requeue(job_id, from_step=from_step)
    return JobActionResult(action="retry", id=record.id, job=Redactor().row(record))


def retry_from_step(job_id: str, step: str, *, driver: JobDriver | None = None) -> JobActionResult:
    """``retry_job(job_id, from_step=step)`` — the steps before ``step`` replay from storage;
    ``step`` and the ones after it run again."""
    return retry_job(job_id, from_step=step, driver=driver)


def cancel_job(job_id: str, reason: str | None = None, *, driver: JobDriver | None = None) -> JobActionResult:
    """Stop a live job. A queued row is cancelled now; a running one stops at its next heartbeat,
    which no longer matches its row (its step writes are refused from then on).

    >>> cancel_job(job_id, "runaway backfill")

    A job that is not live (done, failed, dead, already cancelled), an id no queue holds, and a
    driver with no cancel are ``X_JOB_NOT_CANCELLABLE``. The job's ``on_settled`` is not told: the
    caller of the cancel is the one who observes it. A ``reason`` with a NUL byte or over 500 characters
    is ``X_JOB_ARGUMENT_INVALID``.
    """
    job_id, reason = check_job_id(job_id), check_reason(reason)
    resolved = resolve(driver)
    surface = resolved.operator
    if surface is None:
        raise CancelUnsupportedError(
            f"the {resolved.name!r} driver has no cancel (no operator store)",
            {"job_id": job_id},
        )
    confine_job(surface, job_id)
    record = surface.cancel(job_id, reason)
    if record is None:
        current = surface.get(job_id)
        state = current.state if current is not None else None
        why = f"is {state}" if state is not None else "is held by no queue"
        raise JobNotCancellableError(
            f"job {job_id} {why}; only a live job ({', '.join(LIVE_STATES)}) can be cancelled. "
            f"Fix: python manage.py jobs show {job_id} --json",
            {"job_id": job_id, "state": state},
        )
    return JobActionResult(action="cancel", id=record.id, job=Redactor().row(record))


def remove_job(job_id: str, *, driver: JobDriver | None = None) -> JobActionResult:
    """Delete one job and its steps, in any state but running.

    >>> remove_job(job_id)

    A running job is ``X_JOB_NOT_REMOVABLE`` (cancel it first); an unknown id ``X_JOB_NOT_FOUND``.
    """
    job_id = check_job_id(job_id)
    surface = require_operator(resolve(driver), "remove")
    confine_job(surface, job_id)
    surface.remove(job_id)
    return JobActionResult(action="remove", id=job_id, job=None)


def promote_job(job_id: str, *, driver: JobDriver | None = None) -> JobActionResult:
    """Make a job waiting on its run time — delayed, or backing off — due now.

    >>> promote_job(job_id)

    A job not waiting on its run time is ``X_JOB_NOT_PROMOTABLE``; an unknown id ``X_JOB_NOT_FOUND``.
    """
    job_id = check_job_id(job_id)
    surface = require_operator(resolve(driver), "promote")
    confine_job(surface, job_id)
    record = surface.promote(job_id)
    return JobActionResult(action="promote", id=record.id, job=Redactor().row(record))


def requeue_many(
    *,
    state: JobState,
    queue: str | None = None,
    name: str | None = None,
    tenant_id: str | None = None,
    until_done: bool = False,
    on_progress: BulkProgress | None = None,
    driver: JobDriver | None = None,
) -> BulkOutcome:
    """Re-queue finished rows of ``state`` (at most ``MAX_BULK_ROWS`` per call); a row whose key a
    live job holds stays. ``until_done`` calls again until nothing remains.

    >>> requeue_many(state="dead", name="charge_order", until_done=True).affected

    A live ``state`` is ``X_JOB_NOT_REQUEUEABLE``.
    """
    tenant_id = confine_tenant_filter(tenant_id, what="requeue_many")
    flt = BulkFilter(state=state, queue=queue, name=name, tenant_id=tenant_id)
    surface = require_operator(resolve(driver), "requeue-many")
    return _bulk("requeue-many", flt, surface.requeue_many, until_done, on_progress)


def remove_many(
    *,
    state: JobState,
    queue: str | None = None,
    name: str | None = None,
    tenant_id: str | None = None,
    until_done: bool = False,
    on_progress: BulkProgress | None = None,
    driver: JobDriver | None = None,
) -> BulkOutcome:
    """Delete rows of ``state`` and their steps (at most ``MAX_BULK_ROWS`` per call).

    >>> remove_many(state="done", queue="exports", until_done=True)

    ``state="running"`` is ``X_JOB_NOT_REMOVABLE``.
    """
    tenant_id = confine_tenant_filter(tenant_id, what="remove_many")
    flt = BulkFilter(state=state, queue=queue, name=name, tenant_id=tenant_id)
    surface = require_operator(resolve(driver), "remove-many")
    return _bulk("remove-many", flt, surface.remove_many, until_done, on_progress)


def promote_many(
    *,
    state: JobState,
    queue: str | None = None,
    name: str | None = None,
    tenant_id: str | None = None,
    until_done: bool = False,
    on_progress: BulkProgress | None = None,
    driver: JobDriver | None = None,
) -> BulkOutcome:
    """Make every row of ``state`` still waiting on its run time due now (at most ``MAX_BULK_ROWS``
    per call).

    >>> promote_many(state="delayed", queue="mail", until_done=True)

    A ``state`` other than delayed or ready is ``X_JOB_NOT_PROMOTABLE``.
    """
    tenant_id = confine_tenant_filter(tenant_id, what="promote_many")
    flt = BulkFilter(state=state, queue=queue, name=name, tenant_id=tenant_id)
    surface = require_operator(resolve(driver), "promote-many")
    return _bulk("promote-many", flt, surface.promote_many, until_done, on_progress)


def _bulk(
    action: BulkAction,
    flt: BulkFilter,
    call: Callable[[BulkFilter], BulkResult],
    until_done: bool,
    on_progress: BulkProgress | None,
) -> BulkOutcome:
    """One call, or calls until ``remaining`` is 0. A call that moves nothing ends the loop too: what
    it reports remaining is nothing a further call would move."""
    described = {k: v for k, v in asdict(flt).items() if v is not None}
    affected = calls = 0
    while True:
        result = call(flt)
        calls += 1
        affected += result.affected
        outcome = BulkOutcome(action, described, affected, result.remaining, calls)
        if on_progress is not None:
            on_progress(outcome)
        if not until_done or result.remaining == 0 or result.affected == 0:
            return outcome
