"""Read-only JSON views of the operator surface, for staff: every read ``manage.py jobs`` has — the job
list, one job, the dead letters, queues, workers, tasks, stats, the dashboard's series, the manifest and the
outbox — and the backfill ledger of ``manage.py jobs_backfill --list``.

Include them with ``path("jobs/", include("ultimate_jobs.urls"))``; each answers the operator record's
``as_dict()`` — the same shape ``manage.py jobs … --json`` prints. A caller must be an active staff
user (others are sent to the admin login) holding the matching admin page's view permission (403
otherwise). A refusal is ``{"error": {"code", "message", "meta"}}`` with the code's status: 400 for
input no read can use, 404 for a job no queue holds, 501 on a driver without an operator store.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from .. import operator
from ..contracts.operator import DEFAULT_JOB_PAGE
from ..contracts.ordering import DEFAULT_JOB_ORDER, check_order
from ..core.installed import job_clock
from ..errors import CodedError, JobArgumentInvalidError, JobPageInvalidError, UltimateError
from ..operator.arguments import check_instant, check_state, shown
from ..operator.backfills import DEFAULT_BACKFILL_LIMIT
from ..operator.queues import DEFAULT_STATS_WINDOW, stats_window_ms

View = Callable[..., HttpResponse]

STATUS = {
    "X_JOB_NOT_FOUND": 404,
    "X_JOB_PAGE_INVALID": 400,
    "X_JOB_ID_INVALID": 400,
    "X_JOB_ARGUMENT_INVALID": 400,
    "X_NOT_IMPLEMENTED": 501,
    "X_DRIVER_UNAVAILABLE": 503,
}


def error_response(exc: UltimateError) -> JsonResponse:
    """``{"error": {...}}`` with the status its code maps to (500 for a code not listed)."""
    return JsonResponse({"error": exc.as_dict()}, status=STATUS.get(exc.code, 500))


def operator_view(permission: str) -> Callable[[View], View]:
    """Staff only, GET/HEAD only, never cached, the model ``permission`` (``view_…``, or the matching
    ``change_…`` as the admin allows), and an operator refusal turned into JSON."""

    def wrap(view: View) -> View:
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            change = permission.replace(".view_", ".change_")
            if not (request.user.has_perm(permission) or request.user.has_perm(change)):
                return JsonResponse(
                    {"error": {"code": "forbidden", "message": f"needs the {permission} permission", "meta": {}}},
                    status=403,
                )
            try:
                return view(request, *args, **kwargs)
            except UltimateError as exc:
                return error_response(exc)

        return staff_member_required(never_cache(require_safe(guarded)))

    return wrap


def text(params: QueryDict, name: str) -> str | None:
    """A parameter's text, ``None`` when absent or empty (the operator checks what it holds)."""
    return params.get(name) or None


def number(params: QueryDict, name: str, default: int, error: type[CodedError]) -> int:
    """A whole-number parameter, ``default`` when absent; anything else is ``error`` (the code the
    operator answers for a number out of range there)."""
    raw = params.get(name)
    if not raw:
        return default
    if not (raw.isascii() and raw.lstrip("-").isdigit() and len(raw) <= 12):
        raise error(f"{name}={shown(raw)} is not a number", {name: shown(raw)})
    return int(raw)


def instant(params: QueryDict, name: str) -> int | None:
    """An instant parameter (``check_instant``: epoch ms or an ISO date/datetime), ``None`` when absent."""
    raw = text(params, name)
    return None if raw is None else check_instant(raw, what=name)


@operator_view("ultimate_jobs.view_job")
def list_view(request: HttpRequest) -> HttpResponse:
    """``GET list?queue=&name=&state=&tenant_id=&id_prefix=&idempotency_key=&created_from=&created_to=
    &order=&count=1&limit=&after=|before=``: one page of jobs in ``order`` (newest first by default;
    ``operator.list_jobs``, ``jobs list --json``); ``next`` is the ``after`` of the next page, ``previous``
    the ``before`` of the one before. ``created_from``/``created_to`` take what ``--created-from``/
    ``--created-to`` take. ``count=1`` adds ``count`` (``operator.count_jobs``: exact up to 10,000 rows,
    an estimate labelled by its ``basis`` over that)."""
    params = request.GET
    state = text(params, "state")
    order = check_order(text(params, "order") or DEFAULT_JOB_ORDER)
    filters: dict[str, Any] = {
        "queue": text(params, "queue"),
        "name": text(params, "name"),
        "state": check_state(state) if state is not None else None,
        "tenant_id": text(params, "tenant_id"),
        "id_prefix": text(params, "id_prefix"),
        "idempotency_key": text(params, "idempotency_key"),
        "created_from_ms": instant(params, "created_from"),
        "created_to_ms": instant(params, "created_to"),
    }
    counting = text(params, "count")
    if counting is not None and counting not in ("0", "1"):
        raise JobPageInvalidError(f"count={counting[:20]!r}: pass count=1 to count the rows, or leave it out", {})
    page = operator.list_jobs(
        **filters,
        limit=number(params, "limit", DEFAULT_JOB_PAGE, JobPageInvalidError),
        after=text(params, "after"),
        before=text(params, "before"),
        order=order,
    )
    body = page.as_dict()
    if counting == "1":
        body["count"] = operator.count_jobs(**filters, finished_only=order.endswith("finished")).as_dict()
    return JsonResponse(body)


@operator_view("ultimate_jobs.view_job")
def job_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """``GET job/<id>``: one job with its steps and error (``operator.inspect_job``, ``jobs show --json``);
    404 for an id no queue holds, 400 ``X_JOB_ID_INVALID`` for text that is no job id (the operator
    checks it)."""
    return JsonResponse(operator.inspect_job(job_id).as_dict())


@operator_view("ultimate_jobs.view_deadletter")
def dead_letters_view(request: HttpRequest) -> HttpResponse:
    """``GET dead-letters?queue=&name=&tenant_id=&limit=&after=``: one page of the dead-letter queue,
    newest first (``operator.inspect_dead_letters``); ``next`` is the ``after`` of the older page."""
    params = request.GET
    page = operator.inspect_dead_letters(
        queue=text(params, "queue"),
        name=text(params, "name"),
        tenant_id=text(params, "tenant_id"),
        limit=number(params, "limit", DEFAULT_JOB_PAGE, JobPageInvalidError),
        after=text(params, "after"),
    )
    return JsonResponse(page.as_dict())


@operator_view("ultimate_jobs.view_queue")
def queues_view(request: HttpRequest) -> HttpResponse:
    """``GET queues``: every queue (``operator.inspect_queues``) and the backfill passes in flight
    (``operator.passes_in_flight``), as ``jobs queues --json``, and the clock's now, to age
    ``oldest_ready_ms`` against."""
    rows = operator.inspect_queues()
    passes = operator.passes_in_flight()
    return JsonResponse(
        {
            "now_ms": job_clock().now_ms(),
            "queues": [r.as_dict() for r in rows],
            "backfills": [p.as_dict() for p in passes],
        }
    )


@operator_view("ultimate_jobs.view_worker")
def workers_view(request: HttpRequest) -> HttpResponse:
    """``GET workers``: every live worker (``operator.inspect_workers``, ``jobs workers --json``) and the
    clock's now, to age ``heartbeat_at_ms`` against."""
    rows = operator.inspect_workers()
    return JsonResponse({"now_ms": job_clock().now_ms(), "workers": [w.as_dict() for w in rows]})


@operator_view("ultimate_jobs.view_rateschedule")
def rates_view(request: HttpRequest) -> HttpResponse:
    """``GET rates``: every rate limit and each key's schedule (``operator.inspect_rates``, ``jobs rates
    --json``) and the clock's now, to read ``next_at_ms`` against."""
    rows = operator.inspect_rates()
    return JsonResponse({"now_ms": job_clock().now_ms(), "rates": [r.as_dict() for r in rows]})


@operator_view("ultimate_jobs.view_scheduledtask")
def tasks_view(request: HttpRequest) -> HttpResponse:
    """``GET tasks``: every task (``operator.inspect_tasks``, ``jobs tasks --json``) and the clock's now."""
    rows = operator.inspect_tasks()
    return JsonResponse({"now_ms": job_clock().now_ms(), "tasks": [t.as_dict() for t in rows]})


@operator_view("ultimate_jobs.view_job")
def stats_view(request: HttpRequest) -> HttpResponse:
    """``GET stats?since=24h``: settles per job over the window (``operator.inspect_stats``, ``jobs stats
    --json``); a ``since`` that is no duration, or over ``3650d``, is 400 ``X_JOB_ARGUMENT_INVALID``."""
    since = request.GET.get("since") or DEFAULT_STATS_WINDOW
    try:
        stats_window_ms(since)
    except UltimateError as exc:
        if exc.code == "X_JOB_ARGUMENT_INVALID":
            raise
        raise JobArgumentInvalidError(
            f"since={shown(since)} is not a duration; write 1h, 7d or 30d", {"argument": "since"}
        ) from exc
    return JsonResponse(operator.inspect_stats(since=since).as_dict())


@operator_view("ultimate_jobs.view_dashboard")
def dashboard_view(request: HttpRequest) -> HttpResponse:
    """``GET dashboard?window=1h&job=NAME``: settles per outcome and mean run time bucket by bucket, the queues
    now and the attention strip (``operator.inspect_dashboard``, ``jobs stats --window 1h --json``) — for
    Grafana's JSON datasource or a script; a window other than 1h, 24h or 7d, or a malformed job name, is 400
    ``X_JOB_ARGUMENT_INVALID``."""
    window = request.GET.get("window") or "1h"
    return JsonResponse(operator.inspect_dashboard(window, job=request.GET.get("job") or None).as_dict())


@operator_view("ultimate_jobs.view_job")
def manifest_view(request: HttpRequest) -> HttpResponse:
    """``GET manifest``: every declared job and task (``operator.inspect_manifest``, ``jobs manifest
    --json``) — this process's declarations, no database read."""
    return JsonResponse(operator.inspect_manifest().as_dict())


@operator_view("ultimate_jobs.view_outboxrow")
def outbox_view(request: HttpRequest) -> HttpResponse:
    """``GET outbox?limit=100``: the outbox's pending and set-aside counts and the set-aside rows, oldest
    first (``operator.inspect_outbox``, ``jobs outbox --json``); a limit outside 1..1000 is 400
    ``X_JOB_ARGUMENT_INVALID``."""
    limit = number(request.GET, "limit", DEFAULT_JOB_PAGE, JobArgumentInvalidError)
    return JsonResponse(operator.inspect_outbox(limit=limit).as_dict())


@operator_view("ultimate_jobs.view_backfill")
def backfills_view(request: HttpRequest) -> HttpResponse:
    """``GET backfills?name=&status=&limit=100``: the backfill ledger, newest pass first
    (``operator.inspect_backfills``, ``jobs_backfill --list --json``); a status that is none of running,
    completed, failed, or a limit outside 1..200, is 400 ``X_JOB_ARGUMENT_INVALID``."""
    params = request.GET
    rows = operator.inspect_backfills(
        name=text(params, "name"),
        status=text(params, "status"),
        limit=number(params, "limit", DEFAULT_BACKFILL_LIMIT, JobArgumentInvalidError),
    )
    return JsonResponse({"backfills": [r.as_dict() for r in rows]})
