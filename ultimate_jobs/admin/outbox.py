"""The outbox page: how many staged enqueues wait to publish, and the rows a permanent error set aside
(``operator.inspect_outbox``), each with Retry and Remove buttons (POST, CSRF-checked by
``admin_view``, the change permission) calling the operator and logged."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from .. import operator
from ..errors import JobNotFoundError, UltimateError
from ..models import OutboxRow
from ..operator.arguments import check_job_id
from ._format import now_ms
from ._support import ReadOnlyAdmin, per_row, refusal, report

SHOWN_ROWS = 100


@admin.register(OutboxRow)
class OutboxAdmin(ReadOnlyAdmin):
    """Pending and set-aside counts, the oldest pending row's age, and the set-aside rows."""

    def get_urls(self) -> list[URLPattern]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("retry/", self.admin_site.admin_view(self.retry_view), name=f"{info}_retry"),
            path("remove/", self.admin_site.admin_view(self.remove_view), name=f"{info}_remove"),
            *super().get_urls(),
        ]

    def check_key(self, object_id: str) -> str:
        return check_job_id(object_id)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        problem: UltimateError | None = None
        view: operator.OutboxView | None = None
        try:
            view = operator.inspect_outbox(limit=SHOWN_ROWS)
        except UltimateError as exc:  # the jobs database holds no outbox (not PostgreSQL)
            problem = exc
        now = now_ms()
        age = None if view is None or view.oldest_pending_ms is None else max(0, now - view.oldest_pending_ms)
        context = {"view": view, "age_ms": age, "problem": problem, "shown": SHOWN_ROWS, **(extra_context or {})}
        return self.render_page(request, "admin/ultimate_jobs/outbox.html", "Outbox", context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self.key_refusal(object_id) or HttpResponseRedirect(self.url("changelist"))

    def retry_view(self, request: HttpRequest) -> HttpResponse:
        return require_POST(self._act)(request, retry=True)

    def remove_view(self, request: HttpRequest) -> HttpResponse:
        return require_POST(self._act)(request, retry=False)

    def _act(self, request: HttpRequest, *, retry: bool) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        try:
            ids = [check_job_id(value) for value in request.POST.getlist("id")]
        except UltimateError as exc:  # a NUL byte, a path, a megabyte: a 400 before any statement
            return refusal(exc)
        if not ids:
            return HttpResponseRedirect(self.url("changelist"))
        act = operator.retry_outbox_rows if retry else operator.remove_outbox_rows

        def one(row_id: str) -> str:
            result = act([row_id])
            if not result.landed:
                raise _not_set_aside(row_id)
            return row_id

        outcome = per_row(ids, one)
        verb = "Retried" if retry else "Removed"
        for key, _ in outcome.done:
            self.log_operation(
                request,
                OutboxRow(id=key),
                f"{verb} a set-aside outbox row through ultimate_jobs.operator",
                removed=not retry,
            )
        report(request, outcome, did=verb, noun="outbox row", describe=str)
        return HttpResponseRedirect(self.url("changelist"))


def _not_set_aside(row_id: str) -> UltimateError:
    return JobNotFoundError(
        f"outbox row {row_id} is not set aside (it is pending, published or gone); reload the page",
        {"id": row_id},
    )
