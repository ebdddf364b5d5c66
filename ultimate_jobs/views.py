"""Read-only JSON views of the operator surface, for staff: the queues, one job, the dead letters.

Include them with ``path("jobs/", include("ultimate_jobs.urls"))``; each answers the operator record's
``as_dict()`` — the same shape ``manage.py jobs … --json`` prints. A caller must be an active staff
user (others are sent to the admin login) holding the page's view permission (403 otherwise). A
refusal is ``{"error": {"code", "message", "meta"}}`` with the code's status.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from . import operator
from .conf import job_clock
from .drivers.base import DEFAULT_JOB_PAGE
from .errors import JobPageInvalidError, UltimateError

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


@operator_view("ultimate_jobs.view_queue")
def queues_view(request: HttpRequest) -> HttpResponse:
    """``GET queues``: every queue (``operator.inspect_queues``) and the clock's now, to age
    ``oldest_ready_ms`` against."""
    rows = operator.inspect_queues()
    return JsonResponse({"now_ms": job_clock().now_ms(), "queues": [r.as_dict() for r in rows]})


@operator_view("ultimate_jobs.view_job")
def job_view(request: HttpRequest, job_id: str) -> HttpResponse:
    """``GET job/<id>``: one job with its steps and error (``operator.inspect_job``); 404 for an id no
    queue holds, 400 ``X_JOB_ID_INVALID`` for text that is no job id (the operator checks it)."""
    return JsonResponse(operator.inspect_job(job_id).as_dict())


@operator_view("ultimate_jobs.view_deadletter")
def dead_letters_view(request: HttpRequest) -> HttpResponse:
    """``GET dead-letters?queue=&name=&tenant_id=&limit=&after=``: one page of the dead-letter queue,
    newest first (``operator.inspect_dead_letters``); ``next`` is the ``after`` of the older page."""
    params = request.GET
    raw_limit = params.get("limit")
    try:
        limit = int(raw_limit) if raw_limit else DEFAULT_JOB_PAGE
    except ValueError:
        return error_response(JobPageInvalidError(f"limit={raw_limit!r} is not a number", {"limit": raw_limit}))
    page = operator.inspect_dead_letters(
        queue=params.get("queue") or None,
        name=params.get("name") or None,
        tenant_id=params.get("tenant_id") or None,
        limit=limit,
        after=params.get("after") or None,
    )
    return JsonResponse(page.as_dict())
