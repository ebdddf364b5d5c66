"""What every admin page shares: read-only model admins, the ``operate`` permission, running an operator
action row by row with per-row failures reported by code, and the admin log."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.contrib import admin, messages
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_permission_codename
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..contracts.operator import filter_text_problem
from ..errors import JobPageInvalidError, UltimateError
from ..operator.arguments import check_name, shown
from ._changelist import PageList
from ._format import now_ms

MAX_FAILURES_SHOWN = 20


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:  # ModelAdmin is generic for the type checker only
    _ModelAdmin = admin.ModelAdmin


def refusal(error: UltimateError) -> HttpResponseBadRequest:
    """A 400 page for input no page or action can use: ``CODE: message`` in plain text (nothing the
    caller sent is rendered as HTML, and the message quotes at most the start of it)."""
    return HttpResponseBadRequest(f"{error.code}: {error.message}".encode(), content_type="text/plain; charset=utf-8")


def bad_query(request: HttpRequest) -> HttpResponseBadRequest | None:
    """A 400 for a query string no filter can use (:func:`filter_text_problem`: a NUL byte, or too long)
    instead of the database error a filter on it would raise."""
    for key, values in request.GET.lists():
        for text in (key, *values):
            problem = filter_text_problem(text)
            if problem is not None:
                return refusal(JobPageInvalidError(f"the filter {key[:40]!r} {problem}", {"filter": key[:40]}))
    return None


DATE_PARTS = {"year": (1, 9998), "month": (1, 12), "day": (1, 31)}
"""The date drill-down's parameters and their ranges (the year stops one short of 9999, whose next year
Django's drill-down would compute and overflow)."""


def bad_dates(request: HttpRequest, field: str | None) -> HttpResponseBadRequest | None:
    """A 400 for a date drill-down part (``created_at__year=…``) that is no number in its range, which
    Django's changelist would let overflow into a 500; a date that does not exist (February 30) is left
    to Django, which answers the list with its "invalid lookup" notice."""
    if field is None:
        return None
    for part, (low, high) in DATE_PARTS.items():
        key = f"{field}__{part}"
        for value in request.GET.getlist(key):
            if not (value.isascii() and value.isdigit() and low <= int(value) <= high):
                return refusal(
                    JobPageInvalidError(f"{key}={shown(value)} is not a {part} in {low}..{high}", {"filter": key})
                )
    return None


class ReadOnlyAdmin(_ModelAdmin):
    """No add, change or delete of rows: the tables belong to the driver. What an operator may do is an
    action, allowed by the model's *change* permission (``has_operate_permission``) and carried out
    through ``ultimate_jobs.operator``."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def check_key(self, object_id: str) -> str:
        """The object id of a URL (``…/<id>/change/``), checked before any read: a queue or task name
        here; the job pages take a job id. A refusal is an ``UltimateError``."""
        return check_name(unquote(object_id), what=str(self.opts.verbose_name))

    def key_refusal(self, object_id: str) -> HttpResponse | None:
        """The 400 page for an object id :meth:`check_key` refuses, or ``None``."""
        try:
            self.check_key(object_id)
        except UltimateError as exc:
            return refusal(exc)
        return None

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self.key_refusal(object_id) or super().history_view(request, object_id, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self.key_refusal(object_id) or super().delete_view(request, object_id, extra_context)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Whether the user may act (retry, cancel, pause…): the model's change permission."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{get_permission_codename('change', opts)}")

    def url(self, name: str, *args: object, model: str | None = None) -> str:
        """The URL of one of this site's ultimate_jobs views: ``self.url("changelist")``,
        ``self.url("change", job_id, model="job")``."""
        return reverse(
            f"{self.admin_site.name}:{self.opts.app_label}_{model or self.opts.model_name}_{name}", args=args
        )

    def tabs(self, request: HttpRequest) -> list[dict[str, Any]]:
        """The tabs across the pages this user may view, this admin's marked current."""
        return page_tabs(self.admin_site, request, self.opts.model_name)

    def render_page(
        self, request: HttpRequest, template: str, title: str, context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        """A page of this admin (the queues overview, a job…) in the admin's frame, with its sidebar. The
        templates extend Django's ``change_list.html`` (whose breadcrumbs read ``cl.opts``) or
        ``change_form.html`` (whose last breadcrumb is ``original``, here the title)."""
        page = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "cl": PageList(opts=self.opts),
            "has_view_permission": self.has_view_or_change_permission(request),
            "original": title,
            "title": title,
            "now_ms": now_ms(),
            "can_operate": self.has_operate_permission(request),
            "uj_tabs": self.tabs(request),
            **(context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, template, page)

    def log_operation(self, request: HttpRequest, obj: models.Model, message: str, *, removed: bool = False) -> None:
        """One entry in Django's admin log for one thing an action changed (``obj`` need not be saved:
        the entry keeps its key and ``str()``)."""
        LogEntry.objects.log_actions(
            user_id=request.user.pk or 0,  # an admin view's user is logged in
            queryset=[obj],  # log_actions reads only .pk and str() of each
            action_flag=DELETION if removed else CHANGE,
            change_message=message,
        )

    def log_bulk(self, request: HttpRequest, target: str, message: str, *, removed: bool = False) -> None:
        """One entry in Django's admin log for an action over a filter rather than named rows: on this
        page's model, with no object id and ``target`` (``requeue-many state=dead, queue=payments``) as
        its text."""
        LogEntry.objects.create(
            user_id=request.user.pk or 0,
            content_type=ContentType.objects.get_for_model(self.model, for_concrete_model=False),
            object_id=None,
            object_repr=target[:200],
            action_flag=DELETION if removed else CHANGE,
            change_message=message,
        )


@dataclass
class Failure:
    """One row an action refused: its key, and the operator's code and message."""

    key: str
    code: str
    message: str


T = TypeVar("T")


@dataclass
class Outcome(Generic[T]):
    """What a per-row action did: the rows it changed (with their results) and the rows it refused."""

    done: list[tuple[str, T]] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)


def per_row(keys: Iterable[str], act: Callable[[str], T]) -> Outcome[T]:
    """Call ``act`` on each key in turn; an ``UltimateError`` refuses that row only (by its code), and
    the rest go on."""
    outcome: Outcome[T] = Outcome()
    for key in keys:
        try:
            outcome.done.append((key, act(key)))
        except UltimateError as exc:
            outcome.failed.append(Failure(key, exc.code, exc.message))
    return outcome


def report(request: HttpRequest, outcome: Outcome[Any], *, did: str, noun: str, describe: Callable[[str], str]) -> None:
    """One success message naming what moved, and one error message per refused row (code first)."""
    if outcome.done:
        count = len(outcome.done)
        plural = noun if count == 1 else f"{noun}s"
        messages.success(
            request,
            format_html(
                "{} {} {}: {}",
                did,
                count,
                plural,
                format_html_join(", ", '<code class="uj-id">{}</code>', ((describe(k),) for k, _ in outcome.done)),
            ),
        )
    for failure in outcome.failed[:MAX_FAILURES_SHOWN]:
        messages.error(request, failure_html(failure, describe))
    hidden = len(outcome.failed) - MAX_FAILURES_SHOWN
    if hidden > 0:
        messages.error(request, f"…and {hidden} more refused rows (not shown).")


def failure_html(failure: Failure, describe: Callable[[str], str]) -> SafeString:
    """``<id>: X_CODE — message``."""
    return format_html(
        '<code class="uj-id">{}</code> refused: <code class="uj-code">{}</code> — {}',
        describe(failure.key),
        failure.code,
        failure.message,
    )


TABS = (
    ("dashboard", "Dashboard"),
    ("job", "Jobs"),
    ("deadletter", "Dead letters"),
    ("queue", "Queues"),
    ("worker", "Workers"),
    ("scheduledtask", "Tasks"),
    ("outboxrow", "Outbox"),
    ("backfill", "Backfills"),
)


def page_tabs(site: admin.AdminSite, request: HttpRequest, current: str | None) -> list[dict[str, Any]]:
    """One tab per ultimate_jobs page the user may view, in a fixed order."""
    from django.apps import apps

    found = []
    for model_name, label in TABS:
        model = apps.get_model("ultimate_jobs", model_name)
        try:
            model_admin = site.get_model_admin(model)
        except NotRegistered:
            continue
        if model_admin.has_view_or_change_permission(request):
            url = reverse(f"{site.name}:ultimate_jobs_{model_name}_changelist")
            found.append({"label": label, "url": url, "current": model_name == current})
    return found
