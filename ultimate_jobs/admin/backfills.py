"""The backfill ledger page: every pass ``operator.inspect_backfills`` answers (newest first, a status
filter), each with its rows, pages, cursor and the run's job linked, and every declared backfill's state
(``pending_backfills``). Read-only: a pass is enqueued with ``manage.py jobs_backfill NAME --write``."""

from __future__ import annotations

from contextlib import suppress
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from .. import operator
from ..contracts.schedules import BACKFILL_STATUSES
from ..errors import JobArgumentInvalidError, UltimateError
from ..features.backfills import pending_backfills
from ..models import Backfill
from ..operator.arguments import check_job_id
from ._support import bad_query, refusal
from .fleet import OverviewAdmin

SHOWN_ROWS = 200
BADGES = {"completed": "done"}  # the job badge of the same meaning; running and failed are job states too


@admin.register(Backfill)
class BackfillAdmin(OverviewAdmin):
    """The ledger, filtered by ``?status=`` (running, completed, failed), and the declared backfills."""

    page_template = "admin/ultimate_jobs/backfills.html"
    noun = "backfill"

    def check_key(self, object_id: str) -> str:
        return check_job_id(object_id)  # a ledger row's id is a UUID

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        bad = bad_query(request)
        if bad is not None:
            return bad
        status = request.GET.get("status") or None
        if status is not None and status not in BACKFILL_STATUSES:
            return refusal(
                JobArgumentInvalidError(
                    f"status={status[:40]!r} is not a backfill status; use one of {', '.join(BACKFILL_STATUSES)}",
                    {"filter": "status"},
                )
            )
        declared: list[Any] = []
        with suppress(UltimateError):  # the ledger read below reports the same problem
            declared = pending_backfills().rows
        base = self.url("changelist")
        filters = [
            {
                "label": label,
                "url": f"{base}?{urlencode({'status': value})}" if value else base,
                "current": value == status,
            }
            for value, label in ((None, "All"), *((s, s) for s in BACKFILL_STATUSES))
        ]
        context = {"declared": declared, "filters": filters, "status": status, "shown": SHOWN_ROWS}
        return super().changelist_view(request, {**context, **(extra_context or {})})

    def read(self, request: HttpRequest) -> list[Any]:
        return operator.inspect_backfills(status=request.GET.get("status") or None, limit=SHOWN_ROWS)

    def rows(self, found: list[Any], now: int) -> list[dict[str, Any]]:
        return [
            {
                "row": r,
                "badge": BADGES.get(r.run.status, r.run.status),
                "job_url": self.url("change", r.run.job_id, model="job"),
            }
            for r in found
        ]
