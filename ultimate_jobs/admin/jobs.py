"""The job pages: every job, the dead-letter queue, and one job's page (its step timeline, error stack,
progress and attempts). They read through ``ultimate_jobs.operator`` — the lists ``list_jobs``, the job
page ``inspect_job`` — so they show the rows ``manage.py jobs list`` shows, on every driver with
an operator store; every action goes through the operator too. A driver without an operator store shows the
operator's ``X_NOT_IMPLEMENTED`` on the page."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models.fields import BLANK_CHOICE_DASH
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from .. import operator
from ..contracts.jobs import JobState
from ..contracts.operator import MAX_BULK_ROWS, MAX_JOB_PAGE
from ..errors import JobArgumentInvalidError, JobNotFoundError, UltimateError
from ..models import DeadLetter, Job
from ..operator import BulkOutcome, JobActionResult, JobDetail, JobRow
from ..operator.arguments import check_job_id, check_name, shown
from ._changelist import PageList
from ._format import now_ms
from ._support import Outcome, ReadOnlyAdmin, bad_dates, bad_query, per_row, refusal, report
from .dashboard import charts_url
from .filters import CURSORS, ListQuery, parse_query, sidebar
from .job_page import job_page, step_choices
from .sorting import ORDER_TEXT, Column, sort_headers

SEARCHED = ("id", "=idempotency_key")  # what the search box matches: an id's start, or a whole key
MAX_STEP_PICK = 50  # rows the retry-from-step form inspects at once
OPERATED = "through ultimate_jobs.operator"
NOTHING_SELECTED = "Items must be selected in order to perform actions on them. No items have been changed."
BULK: dict[str, tuple[str, Callable[..., BulkOutcome]]] = {
    "retry": ("Re-queued", operator.requeue_many),
    "promote": ("Promoted", operator.promote_many),
    "remove": ("Removed", operator.remove_many),
}
"""The actions that can act on every row a list matches, and the operator's bulk call for each (one call:
at most ``MAX_BULK_ROWS`` rows; the message says how many remain)."""


@dataclass(frozen=True)
class Selection:
    """What an action acts on: the selected job ids, or (``across``) every row the list's filter matches."""

    ids: tuple[str, ...]
    across: bool
    query: ListQuery


class JobPagesAdmin(ReadOnlyAdmin):
    """What the jobs list and the dead letters share: a list read through ``operator.list_jobs``, paged
    by its cursors, the job page, and the actions."""

    actions = None  # Django's queryset actions are off: these pages act through the operator
    page_state: JobState | None = None  # the state every row of the list has (the dead letters': "dead")
    job_actions: dict[str, str] = {}  # name -> the menu's label
    list_per_page = 50
    columns: tuple[Column, ...] = ()  # the table's columns, in order
    search_help_text = "A job id or its first characters (hex digits, dashes optional), or an exact idempotency key."
    empty_text = "No jobs yet."

    # -- the list ------------------------------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        refused = bad_query(request) or bad_dates(request, "created_at")
        if refused is not None:
            return refused
        try:
            query = parse_query(request.GET, state=self.page_state)
        except UltimateError as exc:
            return refusal(exc)
        offered = self.offered(request)
        if request.method == "POST" and offered:  # with none offered, a POST shows the list, as Django does
            return self.take_action(request, query, offered)
        return self.list_page(request, query, offered, extra_context)

    def offered(self, request: HttpRequest) -> dict[str, str]:
        """The actions this user may run here: every one with the change permission, none without."""
        return dict(self.job_actions) if self.has_operate_permission(request) else {}

    def action_menu(self, offered: dict[str, str], listed: PageList) -> dict[str, Any]:
        """The context Django's change list and ``admin/actions.html`` read to draw the action menu:
        Django's own ``ActionForm`` over the ``offered`` actions (``None`` without any, and no menu),
        the selection counter, and ``actions.js`` as the page's media."""
        if not offered:
            return {"action_form": None, "media": forms.Media()}
        form = self.action_form(auto_id=None)
        menu = form.fields["action"]
        assert isinstance(menu, forms.ChoiceField)  # ActionForm's action is a choice
        menu.choices = [*BLANK_CHOICE_DASH, *offered.items()]
        return {
            "action_form": form,
            "media": forms.Media(js=["admin/js/actions.js"]),
            "actions_on_top": self.actions_on_top,
            "actions_on_bottom": self.actions_on_bottom,
            "actions_selection_counter": self.actions_selection_counter,
            "selection_note": gettext("0 of %(cnt)s selected") % {"cnt": len(listed.result_list)},
        }

    def list_page(
        self, request: HttpRequest, query: ListQuery, offered: dict[str, str], extra: dict[str, Any] | None
    ) -> HttpResponse:
        page: operator.JobPageView | None = None
        counted: operator.JobCount | None = None
        problem: UltimateError | None = None
        if not query.empty:
            try:
                page = operator.list_jobs(**query.arguments(), limit=self.list_per_page)
                counted = operator.count_jobs(**query.count_arguments())
            except UltimateError as exc:
                if exc.code == "X_JOB_PAGE_INVALID":  # a cursor no page produced
                    return refusal(exc)
                problem = exc  # X_NOT_IMPLEMENTED on a driver with no operator store, an unreachable database
        rows = page.rows if page is not None else ()
        across = bool(set(offered) & set(BULK)) and query.bulk_filter(self.page_state) is not None
        listed = PageList(
            opts=self.opts,
            filter_specs=sidebar(query, with_state=self.page_state is None, shown_names=(r.name for r in rows)),
            search_fields=SEARCHED,
            search_help_text=self.search_help_text,
            query=query.term,
            params={k: v for k, v in query.params.items() if k not in CURSORS},
            has_active_filters=query.filtered,
            result_list=rows,
        )
        context = {
            "cl": listed,
            "rows": [{"row": r, "url": self.url("change", r.id)} for r in rows],
            "page": page,
            "problem": problem,
            "query": query,
            **self.action_menu(offered, listed),
            "can_across": across and page is not None and page.next is not None,
            "newer_url": query.url(before=page.previous) if page is not None and page.previous else None,
            "older_url": query.url(after=page.next) if page is not None and page.next else None,
            "columns": sort_headers(query, self.columns),
            "count": counted,
            "window_text": f"{page.window:,}" if page is not None and page.window else None,
            "order_text": ORDER_TEXT[query.order],
            "empty_text": self.empty_text,
            "bulk_max": f"{MAX_BULK_ROWS:,}",
            "charts_url": charts_url(self.admin_site, request, query.name),
            **(extra or {}),
        }
        title = str(self.opts.verbose_name_plural).capitalize()
        return self.render_page(request, "admin/ultimate_jobs/job_list.html", title, context)

    # -- actions -------------------------------------------------------------------------------

    def take_action(self, request: HttpRequest, query: ListQuery, offered: dict[str, str]) -> HttpResponse:
        """A POST from the list: the chosen action on the selected rows (or on every matching row). An
        action the page does not offer, a selected key that is no job id, or more than a page of them, is
        a 400 before any row moves."""
        names = request.POST.getlist("action")
        try:
            for name in names:
                if name and name not in offered:  # "" is the menu's blank choice: "No action selected"
                    raise JobArgumentInvalidError(
                        f"this page offers no action {shown(name)}; pick one of {', '.join(offered)}",
                        {"argument": "action", "value": shown(name)},
                    )
            keys = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
            if len(keys) > MAX_JOB_PAGE:
                raise JobArgumentInvalidError(
                    f"{len(keys)} rows selected; act on at most {MAX_JOB_PAGE} at once, or on every matching row",
                    {"argument": helpers.ACTION_CHECKBOX_NAME, "max": MAX_JOB_PAGE},
                )
            ids = tuple(dict.fromkeys(check_job_id(key) for key in keys))
        except UltimateError as exc:
            return refusal(exc)
        index = request.POST.get("index", "0")
        chosen = names[int(index)] if index.isdigit() and int(index) < len(names) else ""
        back = HttpResponseRedirect(request.get_full_path())
        across = request.POST.get("select_across") == "1"
        if not chosen:
            messages.warning(request, "No action selected.")
            return back
        if not ids and not across:
            messages.warning(request, NOTHING_SELECTED)
            return back
        selection = Selection(ids=ids, across=across, query=query)
        if chosen in ("retry", "cancel", "promote"):
            return self.act_rows(request, selection, chosen) or back
        act: Callable[[HttpRequest, Selection], HttpResponse | None] = getattr(self, f"act_{chosen}")
        return act(request, selection) or back

    def run_action(
        self,
        request: HttpRequest,
        ids: tuple[str, ...] | list[str],
        *,
        did: str,
        act: Callable[[str], JobActionResult],
        log: str,
        removed: bool = False,
        scoped: bool = True,
    ) -> Outcome[JobActionResult]:
        """``act`` on each job through the operator, each read first (``inspect_job``) for the admin log
        and — when ``scoped`` — refused unless it is still of the page's state (a dead letter retried
        since the page was loaded is no longer one). Each success is logged, each refusal reported with
        its code; the other rows go on."""
        rows: dict[str, JobRow] = {}

        def one(key: str) -> JobActionResult:
            row = operator.inspect_job(key).job
            if scoped and self.page_state is not None and row.state != self.page_state:
                raise JobNotFoundError(
                    f"job {key} is {row.state}, not {self.page_state} any more; reload the page",
                    {"job_id": key, "state": row.state},
                )
            rows[key] = row
            return act(key)

        outcome = per_row(ids, one)
        for key, result in outcome.done:
            state = f"; now {result.job.state}" if result.job is not None else ""
            self.log_operation(request, self.log_object(rows[key]), f"{log} {OPERATED}{state}", removed=removed)
        report(request, outcome, did=did, noun="job", describe=str)
        return outcome

    def act_across(self, request: HttpRequest, selection: Selection, action: str) -> HttpResponse | None:
        """``action`` on every row the list's filter matches: one call of the operator's bulk action
        (``requeue_many`` …, at most ``MAX_BULK_ROWS`` rows), logged once."""
        flt = selection.query.bulk_filter(self.page_state)
        if flt is None or action not in BULK:
            return refusal(
                JobArgumentInvalidError(
                    f"{action} acts on the selected rows only here (every matching row needs a state filter, no "
                    "search, key or dates, and retry, promote or remove); select the rows instead",
                    {"argument": "select_across", "action": action},
                )
            )
        did, call = BULK[action]
        described = ", ".join(f"{k}={v}" for k, v in flt.items() if v is not None)
        try:
            outcome = call(**flt)
        except UltimateError as exc:
            messages.error(request, f"{exc.code} — {exc.message}")
            return None
        moved = f"{outcome.affected} job{'' if outcome.affected == 1 else 's'}"
        more = f"; {outcome.remaining} more remain: run it again" if outcome.remaining else ""
        messages.success(request, f"{did} {moved} matching {described}{more}")
        if outcome.affected:
            self.log_bulk(
                request,
                f"{outcome.action} {described}",
                f"{did} {moved} ({outcome.action}, {described}) {OPERATED}",
                removed=action == "remove",
            )
        return None

    def row_actions(self, request: HttpRequest) -> dict[str, tuple[str, Callable[[str], JobActionResult], str]]:
        """Each action on one job by name: what the message says it did, the operator call, the log's verb."""
        reason = f"cancelled from the admin by {request.user.get_username()}"
        return {
            "retry": ("Retried", operator.retry_job, "Retried"),
            "cancel": ("Cancelled", lambda k: operator.cancel_job(k, reason), "Cancelled"),
            "promote": ("Promoted", operator.promote_job, "Promoted"),
            "remove": ("Removed", operator.remove_job, "Removed"),
        }

    def act_rows(self, request: HttpRequest, selection: Selection, action: str) -> HttpResponse | None:
        """Retry, cancel or promote: on each selected row, or on every matching row."""
        if selection.across:
            return self.act_across(request, selection, action)
        did, act, log = self.row_actions(request)[action]
        self.run_action(request, selection.ids, did=did, act=act, log=log)
        return None

    def act_remove(self, request: HttpRequest, selection: Selection) -> HttpResponse | None:
        across = selection.query.bulk_filter(self.page_state) if selection.across else None
        if selection.across and across is None:  # refused before a confirmation asks about it
            return self.act_across(request, selection, "remove")
        if request.POST.get("post") != "yes":
            return self.render_page(
                request,
                "admin/ultimate_jobs/remove_confirmation.html",
                "Remove jobs?",
                {
                    "rows": [] if selection.across else [d.job for d in self.details(selection.ids)],
                    "ids": selection.ids,
                    "across": selection.across,
                    "across_filter": ", ".join(f"{k}={v}" for k, v in (across or {}).items() if v is not None),
                    "action": "remove",
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        if selection.across:
            return self.act_across(request, selection, "remove")
        did, act, log = self.row_actions(request)["remove"]
        self.run_action(request, selection.ids, did=did, act=act, log=log, removed=True)
        return None

    def details(self, ids: tuple[str, ...]) -> list[JobDetail]:
        """Each job ``ids`` names that a queue still holds, read through the operator."""
        found = []
        for job_id in ids:
            try:
                found.append(operator.inspect_job(job_id))
            except UltimateError:
                continue  # gone since the page was loaded: the action itself reports it
        return found

    def log_object(self, row: JobRow) -> Job:
        """An unsaved row standing for ``row`` in the admin log (its key, and ``name id (state)``)."""
        obj: Job = self.model(pk=uuid.UUID(row.id), name=row.name, state=row.state)
        return obj

    # -- the job page --------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        act = path("<path:object_id>/act/", self.admin_site.admin_view(self.act_view), name=f"{info}_act")
        return [act, *super().get_urls()]

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Job | None:
        """The job the history page names, read through the operator (``None`` once no queue holds it)."""
        try:
            return self.log_object(operator.inspect_job(object_id).job)
        except UltimateError:
            return None

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
            page = "admin/ultimate_jobs/includes/object_base.html"  # the operator's refusal, in the page's frame
            return self.render_page(request, page, f"Job {job_id}", {"problem": exc})
        title = f"{detail.job.name} {job_id}"
        context = {
            **job_page(detail, now_ms(), self.url),
            "charts_url": charts_url(self.admin_site, request, detail.job.name),
        }
        return self.render_page(request, "admin/ultimate_jobs/job_detail.html", title, context)

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
        choices = self.row_actions(request)
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
        removed = action == "remove"
        outcome = self.run_action(request, [job_id], did=did, act=act, log=log, removed=removed, scoped=False)
        if removed and outcome.done:
            return HttpResponseRedirect(self.url("changelist"))
        return HttpResponseRedirect(self.url("change", job_id))


@admin.register(Job)
class JobAdmin(JobPagesAdmin):
    """Every job, newest first: filter by state, queue, job, tenant, key and creation date; search an id
    prefix or an idempotency key; retry, cancel, promote or remove the selection — or every matching
    row."""

    columns = (
        Column("job", sorts=(("job", "name"),)),
        Column("queue", sorts=(("queue", "queue"),), label=" · tenant"),
        Column("state", "state · ", sorts=(("attempts", "attempts"),)),
        Column("when", sorts=(("created", "created"), ("run at", "run_at"), ("finished", "finished"))),
    )
    job_actions = {
        "retry": "Retry selected jobs",
        "cancel": "Cancel selected jobs",
        "promote": "Promote selected jobs (run now)",
        "remove": "Remove selected jobs…",
    }


@admin.register(DeadLetter)
class DeadLetterAdmin(JobPagesAdmin):
    """The dead-letter queue: why each job died, and retry — whole, or from a step — or remove."""

    page_state = "dead"
    columns = (
        Column("job", sorts=(("job", "name"),)),
        Column("queue", sorts=(("queue", "queue"),), label=" · tenant"),
        Column("error", "why it died"),
        Column("died", sorts=(("died", "finished"), ("created", "created"), ("attempts", "attempts"))),
    )
    job_actions = {
        "retry": "Retry selected jobs",
        "retry_from_step": "Retry selected jobs from a step…",
        "remove": "Remove selected jobs…",
    }
    empty_text = "No dead letters: no job has run out of attempts."

    def act_retry_from_step(self, request: HttpRequest, selection: Selection) -> HttpResponse | None:
        if selection.across:
            return self.act_across(request, selection, "retry_from_step")
        if len(selection.ids) > MAX_STEP_PICK:
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
                selection.ids,
                did=f"Retried from step “{step}”",
                act=lambda k: operator.retry_from_step(k, step),
                log=f"Retried from step {step!r}",
            )
            return None
        return self.render_page(
            request,
            "admin/ultimate_jobs/retry_from_step.html",
            "Retry from a step",
            {
                **step_choices(self.details(selection.ids)),
                "action": "retry_from_step",
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            },
        )
