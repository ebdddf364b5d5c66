"""The job pages: every job, the dead-letter queue, and one job's page (its step timeline, error stack,
progress and attempts). The lists read ``x_jobs`` through the models; the job page and every action go
through ``ultimate_jobs.operator``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import ShowFacets
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Q
from django.db.models.functions import Left
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from .. import operator
from ..drivers.base import LIVE_STATES
from ..errors import JobArgumentInvalidError, UltimateError
from ..models import DeadLetter, Job
from ..operator import JobActionResult, JobDetail
from ..operator.arguments import check_job_id, check_name, shown
from ..redaction import scrub, secret_values
from ._format import (
    EMPTY,
    badge_html,
    code_html,
    id_html,
    now_ms,
    pretty_json,
    time_html,
)
from ._support import Outcome, ReadOnlyAdmin, bad_dates, bad_query, per_row, refusal, report
from .filters import CappedPaginator, JobNameFilter, QueueFilter, TenantFilter

FINISHED_STATES = ("done", "failed", "dead", "cancelled")
MAX_STEP_PICK = 50  # rows the retry-from-step form inspects at once
OPERATED = "through ultimate_jobs.operator"


def id_range(term: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The uuid range whose text starts with ``term`` (dashes optional), so an id prefix rides the
    primary key; ``None`` when ``term`` cannot start an id."""
    digits = term.strip().lower().replace("-", "")
    if not digits or len(digits) > 32 or any(c not in "0123456789abcdef" for c in digits):
        return None
    pad = 32 - len(digits)
    return uuid.UUID(digits + "0" * pad), uuid.UUID(digits + "f" * pad)


class JobPagesAdmin(ReadOnlyAdmin):
    """What the jobs list and the dead letters share: a big-table list, the job page, per-row actions."""

    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")  # x_jobs_created_idx
    search_fields = ("idempotency_key",)  # replaced by get_search_results; present so the box shows
    search_help_text = "A job id (or its first characters) or an exact idempotency key."
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = ShowFacets.NEVER  # a count per choice is a scan per choice
    list_per_page = 50
    change_list_template = "admin/ultimate_jobs/job_list.html"

    deferred: tuple[str, ...] = ("input", "progress", "last_error")

    # -- the list ------------------------------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        refused = bad_query(request) or bad_dates(request, self.date_hierarchy)
        if refused is not None:
            return refused
        title = str(self.opts.verbose_name_plural).capitalize()
        return super().changelist_view(
            request, {"title": title, "uj_tabs": self.tabs(request), **(extra_context or {})}
        )

    def get_queryset(self, request: HttpRequest) -> models.QuerySet[Job]:
        # The list never shows the input, progress or stack: leave them in the table.
        return super().get_queryset(request).defer(*self.deferred)

    def get_search_results(
        self, request: HttpRequest, queryset: models.QuerySet[Job], search_term: str
    ) -> tuple[models.QuerySet[Job], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(idempotency_key=term)
        bounds = id_range(term)
        if bounds is not None:
            match |= Q(id__gte=bounds[0], id__lte=bounds[1])
        return queryset.filter(match), False

    @admin.display(description="job", ordering="id")
    def job(self, obj: Job) -> SafeString:
        """The name, and under it the whole id (a UUIDv7's first characters are its creation time, shared
        by every job enqueued in the same minute, so a shortened id would not tell them apart)."""
        return format_html('<span class="uj-job-name">{}</span><br>{}', obj.name, id_html(obj.pk))

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: Job) -> SafeString:
        """The state, and under it the last error's code while one is on the row."""
        if not obj.last_code:
            return badge_html(obj.state)
        return format_html("{}<br>{}", badge_html(obj.state), code_html(obj.last_code))

    @admin.display(description="attempts")
    def attempts_of(self, obj: Job) -> str:
        return f"{obj.attempts} / {obj.max_attempts}"

    @admin.display(description="queue · tenant", ordering="queue")
    def queue_tenant(self, obj: Job) -> SafeString:
        """The queue, and under it the tenant the job runs for (when it has one)."""
        if obj.tenant_id is None:
            return format_html("{}", obj.queue)
        return format_html(
            '{}<div class="uj-sub">tenant <span class="uj-mono">{}</span></div>', obj.queue, obj.tenant_id
        )

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Job) -> SafeString:
        return time_html(obj.created_at)

    @admin.display(description="runs at", ordering="run_at")
    def runs_at(self, obj: Job) -> SafeString:
        if obj.state not in ("ready", "delayed"):
            return EMPTY
        return time_html(obj.run_at)

    # -- actions -------------------------------------------------------------------------------

    def response_action(self, request: HttpRequest, queryset: models.QuerySet[Job]) -> HttpResponse | None:
        """A 400 for an action this page does not offer this user, or a selected key that is no job id,
        before Django filters the rows on it (a key Postgres cannot compare with a uuid would be a 500)."""
        try:
            offered = self.get_actions(request)
            for name in request.POST.getlist("action"):
                if name and name not in offered:  # "" is the menu's blank choice: Django's "No action selected"
                    raise JobArgumentInvalidError(
                        f"this page offers no action {shown(name)}; pick one of {', '.join(offered)}",
                        {"argument": "action", "value": shown(name)},
                    )
            for key in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                check_job_id(key)
        except UltimateError as exc:
            return refusal(exc)
        return super().response_action(request, queryset)

    def run_action(
        self,
        request: HttpRequest,
        rows: list[Job],
        *,
        did: str,
        act: Callable[[str], JobActionResult],
        log: str,
        removed: bool = False,
    ) -> Outcome[JobActionResult]:
        """``act`` on each row through the operator: each success logged in the admin log, each refusal
        reported with its code; the other rows go on."""
        by_key = {str(row.pk): row for row in rows}
        outcome = per_row(by_key, act)
        for key, result in outcome.done:
            state = f"; now {result.job.state}" if result.job is not None else ""
            self.log_operation(request, by_key[key], f"{log} {OPERATED}{state}", removed=removed)
        report(request, outcome, did=did, noun="job", describe=str)
        return outcome

    @admin.action(description="Retry selected jobs", permissions=["operate"])
    def retry(self, request: HttpRequest, queryset: models.QuerySet[Job]) -> None:
        self.run_action(request, list(queryset), did="Retried", act=operator.retry_job, log="Retried")

    @admin.action(description="Cancel selected jobs", permissions=["operate"])
    def cancel(self, request: HttpRequest, queryset: models.QuerySet[Job]) -> None:
        reason = f"cancelled from the admin by {request.user.get_username()}"
        self.run_action(
            request, list(queryset), did="Cancelled", act=lambda k: operator.cancel_job(k, reason), log="Cancelled"
        )

    @admin.action(description="Promote selected jobs (run now)", permissions=["operate"])
    def promote(self, request: HttpRequest, queryset: models.QuerySet[Job]) -> None:
        self.run_action(request, list(queryset), did="Promoted", act=operator.promote_job, log="Promoted")

    @admin.action(description="Remove selected jobs…", permissions=["operate"])
    def remove(self, request: HttpRequest, queryset: models.QuerySet[Job]) -> TemplateResponse | None:
        rows = list(queryset)
        if request.POST.get("post") != "yes":
            return self.render_page(
                request,
                "admin/ultimate_jobs/remove_confirmation.html",
                "Remove jobs?",
                {"rows": rows, "action": "remove", "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME},
            )
        self.run_action(request, rows, did="Removed", act=operator.remove_job, log="Removed", removed=True)
        return None

    # -- the job page --------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        act = path("<path:object_id>/act/", self.admin_site.admin_view(self.act_view), name=f"{info}_act")
        return [act, *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        try:
            job_id = self.check_key(object_id)
        except UltimateError as exc:
            return refusal(exc)
        try:
            detail = operator.inspect_job(job_id)
        except UltimateError as exc:
            if exc.code == "X_JOB_NOT_FOUND":
                messages.warning(request, f"No queue holds job {job_id} (removed?).")
                return HttpResponseRedirect(self.url("changelist"))
            raise
        now = now_ms()
        title = f"{detail.job.name} {job_id}"
        return self.render_page(request, "admin/ultimate_jobs/job_detail.html", title, job_page(detail, now, self))

    def check_key(self, object_id: str) -> str:
        """A job page's object id is a job id (``X_JOB_ID_INVALID`` otherwise), in its canonical text."""
        return check_job_id(unquote(object_id))

    def act_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The job page's buttons: one action on this job, through the operator (POST, CSRF-checked by
        ``admin_view``, change permission)."""
        return require_POST(self._act)(request, object_id)

    def _act(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        action = request.POST.get("action", "")
        reason = f"cancelled from the admin by {request.user.get_username()}"
        choices: dict[str, tuple[str, Callable[[str], JobActionResult], str]] = {
            "retry": ("Retried", operator.retry_job, "Retried"),
            "cancel": ("Cancelled", lambda k: operator.cancel_job(k, reason), "Cancelled"),
            "promote": ("Promoted", operator.promote_job, "Promoted"),
            "remove": ("Removed", operator.remove_job, "Removed"),
        }
        try:
            job_id = self.check_key(object_id)
            if action == "retry_from_step":
                step = check_name(request.POST.get("step", ""), what="step")
                did, act, log = "Retried", lambda k: operator.retry_from_step(k, step), f"Retried from step {step!r}"
            elif action in choices:
                did, act, log = choices[action]
            else:
                raise JobArgumentInvalidError(
                    f"a job page has no action {shown(action)}; one of {', '.join(choices)}, retry_from_step",
                    {"argument": "action", "value": shown(action)},
                )
        except UltimateError as exc:
            return refusal(exc)
        try:
            current = operator.inspect_job(job_id).job
            row = self.model(pk=uuid.UUID(job_id), name=current.name, state=current.state)
        except UltimateError:
            row = self.model(pk=uuid.UUID(job_id), name="?", state="?")
        outcome = self.run_action(request, [row], did=did, act=act, log=log, removed=action == "remove")
        if action == "remove" and outcome.done:
            return HttpResponseRedirect(self.url("changelist"))
        return HttpResponseRedirect(self.url("change", job_id))


def job_page(detail: JobDetail, now: int, model_admin: JobPagesAdmin) -> dict[str, Any]:
    """The job page's context: the row, a timeline of its steps (bars placed on the run's span), the
    error, progress and attempts, and which actions apply to its state."""
    job = detail.job
    steps = list(detail.steps)
    span_start = min((s.started_at_ms for s in steps), default=job.created_at_ms)
    ends = [s.finished_at_ms or s.wake_at_ms or now for s in steps]
    span_end = max([*ends, span_start + 1])
    span = span_end - span_start
    timeline = []
    for step, end in zip(steps, ends, strict=True):
        left = (step.started_at_ms - span_start) * 100 / span
        width = max((end - step.started_at_ms) * 100 / span, 0.6)
        timeline.append(
            {
                "step": step,
                "left": f"{left:.2f}",
                "width": f"{min(width, 100 - left):.2f}",
                "offset_ms": step.started_at_ms - span_start,
                "output": pretty_json(step.output) if step.output is not None else None,
                "meta": pretty_json(dict(step.meta)) if step.meta else None,
            }
        )
    progress = job.progress
    percent = None
    if progress is not None and progress.total:
        percent = max(0.0, min(100.0, progress.done * 100 / progress.total))
    try:
        json_url: str | None = reverse("ultimate_jobs:job", args=[job.id])
    except NoReverseMatch:
        json_url = None
    return {
        "job": job,
        "detail": detail,
        "timeline": timeline,
        "span_ms": span,
        "error": detail.error,
        "progress": progress,
        "percent": f"{percent:.1f}" if percent is not None else None,
        "input_json": pretty_json(job.input),
        "finished": job.state in FINISHED_STATES,
        "failed_here": job.state in ("dead", "failed") and detail.error is not None,
        "can_retry": job.state in FINISHED_STATES,
        "can_cancel": job.state in LIVE_STATES,
        "can_promote": job.state in ("delayed", "ready") and job.run_at_ms > now,
        "can_remove": job.state != "running",
        "act_url": model_admin.url("act", job.id),
        "history_url": model_admin.url("history", job.id),
        "changelist_url": model_admin.url("changelist"),
        "json_url": json_url,
    }


@admin.register(Job)
class JobAdmin(JobPagesAdmin):
    """Every job, newest first: filter by state, queue, job and tenant; search an id prefix or an
    idempotency key; retry, cancel, promote or remove the selection."""

    list_display = ("job", "queue_tenant", "state_badge", "attempts_of", "created", "runs_at")
    list_display_links = ("job",)
    list_filter = ("state", QueueFilter, JobNameFilter, TenantFilter)
    actions = ["retry", "cancel", "promote", "remove"]


@admin.register(DeadLetter)
class DeadLetterAdmin(JobPagesAdmin):
    """The dead-letter queue: why each job died, and retry — whole, or from a step — or remove."""

    list_display = ("job", "queue_tenant", "error_head", "died")
    list_display_links = ("job",)
    list_filter = (QueueFilter, JobNameFilter, TenantFilter)
    actions = ["retry", "retry_from_step", "remove"]
    deferred = ("progress", "last_error")  # the input stays: it names the secrets to scrub

    def get_queryset(self, request: HttpRequest) -> models.QuerySet[Job]:
        return super().get_queryset(request).annotate(error_head=Left("last_error", 240))

    @admin.display(description="why it died")
    def error_head(self, obj: Job) -> SafeString:
        """The code (when the error had one) and the error's first line, scrubbed of the values of the
        job's secret input fields as every operator surface is (:mod:`ultimate_jobs.redaction`)."""
        head = scrubbed(obj, (getattr(obj, "error_head", None) or "").split("\n", 1)[0])
        if not head and not obj.last_code:
            return EMPTY
        code = format_html("{}<br>", code_html(obj.last_code)) if obj.last_code else ""
        return format_html('{}<span class="uj-error-head" title="{}">{}</span>', code, head, head)

    @admin.display(description="died", ordering="finished_at")
    def died(self, obj: Job) -> SafeString:
        """When, and after how many of its attempts (fewer than all: a terminal error)."""
        return format_html(
            '{}<div class="uj-sub">attempt {} of {}</div>', time_html(obj.finished_at), obj.attempts, obj.max_attempts
        )

    @admin.action(description="Retry selected jobs from a step…", permissions=["operate"])
    def retry_from_step(self, request: HttpRequest, queryset: models.QuerySet[Job]) -> HttpResponse | None:
        rows = list(queryset[: MAX_STEP_PICK + 1])
        if len(rows) > MAX_STEP_PICK:
            messages.error(request, f"Pick at most {MAX_STEP_PICK} jobs to retry from a step.")
            return None
        step = request.POST.get("step", "").strip()
        if request.POST.get("post") == "yes" and step:
            try:
                check_name(step, what="step")
            except UltimateError as exc:
                return refusal(exc)
            self.run_action(
                request,
                rows,
                did=f"Retried from step “{step}”",
                act=lambda k: operator.retry_from_step(k, step),
                log=f"Retried from step {step!r}",
            )
            return None
        return self.render_page(
            request,
            "admin/ultimate_jobs/retry_from_step.html",
            "Retry from a step",
            {**step_choices(rows), "action": "retry_from_step", "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME},
        )


def scrubbed(obj: Job, text: str) -> str:
    """``text`` without the clear values of ``obj``'s sealed secret input fields."""
    if not text:
        return text
    return str(scrub(text, secret_values(obj.input)))


def step_choices(rows: list[Job]) -> dict[str, Any]:
    """Each selected job with its steps (read through the operator), and every step name among them in
    the order the runs started them — the choices of the retry-from-step form."""
    order: dict[str, int] = {}
    picked = []
    for row in rows:
        try:
            steps = operator.inspect_job(str(row.pk)).steps
        except UltimateError:
            steps = ()
        for step in steps:
            order[step.name] = min(order.get(step.name, step.seq), step.seq)
        picked.append({"row": row, "steps": [s.name for s in steps]})
    return {"picked": picked, "step_names": sorted(order, key=lambda n: (order[n], n))}
