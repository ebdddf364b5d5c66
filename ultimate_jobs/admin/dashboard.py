"""The dashboard page: ``operator.inspect_dashboard`` drawn as SVG charts (:mod:`.charts`), each with its
table behind it, the queues now and the attention strip, each item a link into the list it summarises.
``?window=1h|24h|7d`` picks the window and ``?job=NAME`` one job's series. The page refreshes itself every
few seconds with a plain ``fetch`` of ``data/`` — the same read as JSON, with the page's body rendered by
the server — so nothing but this module draws a chart."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, URLPattern, path, reverse

from .. import operator
from ..errors import UltimateError
from ..models import Dashboard
from ..operator.dashboard import WINDOWS
from ._support import ReadOnlyAdmin, bad_query, refusal
from .charts import depth_chart, run_time_chart, settles_chart, wait_chart

REFRESH_MS = 5_000
"""How often the open page asks for its data again."""

ATTENTION_PAGES = {  # item kind: (the model whose list it summarises, the list's query)
    "dead_letters": ("deadletter", {}),
    "paused_queues": ("queue", {}),
    "stale_workers": ("worker", {}),
    "outbox_set_aside": ("outboxrow", {}),
    "failed_backfills": ("backfill", {"status": "failed"}),
    "disabled_endpoints": ("webhookendpointstate", {}),
}


@admin.register(Dashboard)
class DashboardAdmin(ReadOnlyAdmin):
    """The dashboard: jobs settled per outcome and mean run time over time, the queues, what needs attention."""

    def get_urls(self) -> list[URLPattern]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        return [path("data/", self.admin_site.admin_view(self.data_view), name=f"{info}_data"), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        read = self._read(request)
        if isinstance(read, HttpResponse):
            return read
        window, job, board = read
        context = {
            "body": self._body(request, board),
            "windows": [(w, self._url(request, w, job, page=True), w == window) for w in WINDOWS],
            "job": job,
            "all_jobs_url": self._url(request, window, None, page=True),
            "data_url": self._url(request, window, job, page=False),
            "refresh_ms": REFRESH_MS,
        }
        return self.render_page(request, "admin/ultimate_jobs/dashboard.html", "Dashboard", context)

    def data_view(self, request: HttpRequest) -> HttpResponse:
        """``data/?window=…&job=…``: the dashboard as JSON (``jobs stats --window --json``'s shape) plus
        ``html``, the page's body as the server renders it."""
        read = self._read(request)
        if isinstance(read, HttpResponse):
            return read
        _, _, board = read
        return JsonResponse({**board.as_dict(), "html": self._body(request, board)})

    def _read(self, request: HttpRequest) -> HttpResponse | tuple[str, str | None, operator.DashboardView]:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        refused = bad_query(request)
        if refused is not None:
            return refused
        window = request.GET.get("window") or "1h"
        job = request.GET.get("job") or None
        try:
            return window, job, operator.inspect_dashboard(window, job=job)
        except UltimateError as exc:  # a window not offered, a malformed job name, no counters here
            return refusal(exc)

    def _url(self, request: HttpRequest, window: str, job: str | None, *, page: bool) -> str:
        name = "changelist" if page else "data"
        query = {"window": window, **({"job": job} if job else {})}
        return reverse(f"{self.admin_site.name}:ultimate_jobs_dashboard_{name}") + "?" + urlencode(query)

    def _body(self, request: HttpRequest, board: operator.DashboardView) -> str:
        of = f" of {board.job}" if board.job else ""
        charts = [
            settles_chart(board.points, board.width_ms, title=f"Jobs settled{of}, by outcome"),
            run_time_chart(board.points, board.width_ms, title=f"Run time{of}, mean and p95"),
        ]
        if board.job is None:  # waits and depth are kept per queue, not per job
            charts.append(wait_chart(board.waits, board.width_ms, title="Wait from run time to start, p95 by queue"))
            charts.append(depth_chart(board.depths, board.width_ms, title="Jobs waiting by queue (sampled)"))
        context = {
            "board": board,
            "total": board.total,
            "charts": charts,
            "attention": [(item, self._attention_url(item.kind)) for item in board.attention],
            "queue_url": reverse(f"{self.admin_site.name}:ultimate_jobs_queue_changelist"),
        }
        return render_to_string("admin/ultimate_jobs/includes/dashboard_body.html", context, request=request)

    def _attention_url(self, kind: str) -> str | None:
        model, query = ATTENTION_PAGES[kind]
        try:
            url = reverse(f"{self.admin_site.name}:ultimate_jobs_{model}_changelist")
        except NoReverseMatch:  # a page this site does not register: the item shows without a link
            return None
        return url + ("?" + urlencode(query) if query else "")


def charts_url(site: admin.AdminSite, request: HttpRequest, job: str | None) -> str | None:
    """The dashboard of ``job`` over the last day — what the job page and a job list filtered to one name
    link to — or ``None`` without a job or when this user may not open the dashboard."""
    if job is None or not site.get_model_admin(Dashboard).has_view_or_change_permission(request):
        return None
    return reverse(f"{site.name}:ultimate_jobs_dashboard_changelist") + "?" + urlencode({"window": "24h", "job": job})
