"""The fleet pages: the queues overview, the workers, the tasks, the rate limits. Each renders an
operator read (``inspect_queues``, ``inspect_workers``, ``inspect_tasks``, ``inspect_rates``) instead of a
table list; pause and resume are POST buttons (CSRF-checked by ``admin_view``, change permission) calling
the operator."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from .. import operator
from ..errors import UltimateError
from ..models import Queue, RateSchedule, ScheduledTask, Worker
from ..operator import PauseState
from ..operator.arguments import check_name
from ..operator.dashboard import STALE_BEAT_MS
from ._format import now_ms
from ._support import ReadOnlyAdmin, per_row, refusal, report

LATE_MS = 5 * 60_000  # an oldest due job older than this shows as late (the metrics doc's example alert)


class OverviewAdmin(ReadOnlyAdmin):
    """An admin whose list is an operator read rendered by a template, with pause/resume buttons."""

    page_template = ""
    noun = ""

    def read(self, request: HttpRequest) -> list[Any]:
        """The operator read the page renders (``request`` carries the page's filters, if it has any)."""
        raise NotImplementedError

    def rows(self, found: list[Any], now: int) -> list[dict[str, Any]]:
        return [{"row": r} for r in found]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        now = now_ms()
        problem: UltimateError | None = None
        try:
            found = self.read(request)
        except UltimateError as exc:  # e.g. X_NOT_IMPLEMENTED on a driver with no operator store
            found, problem = [], exc
        context = {"rows": self.rows(found, now), "problem": problem, **(extra_context or {})}
        return self.render_page(request, self.page_template, str(self.opts.verbose_name_plural).capitalize(), context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self.key_refusal(object_id) or HttpResponseRedirect(self.url("changelist"))


class PausableAdmin(OverviewAdmin):
    """An overview with pause/resume buttons, each through the operator and logged."""

    key_field = ""

    def pause_one(self, name: str) -> PauseState:
        raise NotImplementedError

    def resume_one(self, name: str) -> PauseState:
        raise NotImplementedError

    def get_urls(self) -> list[URLPattern]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("pause/", self.admin_site.admin_view(self.pause_view), name=f"{info}_pause"),
            path("resume/", self.admin_site.admin_view(self.resume_view), name=f"{info}_resume"),
            *super().get_urls(),
        ]

    def pause_view(self, request: HttpRequest) -> HttpResponse:
        return require_POST(self._toggle)(request, paused=True)

    def resume_view(self, request: HttpRequest) -> HttpResponse:
        return require_POST(self._toggle)(request, paused=False)

    def _toggle(self, request: HttpRequest, *, paused: bool) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        try:
            name = check_name(request.POST.get("name", "").strip(), what=self.noun)
        except UltimateError as exc:  # blank, a NUL byte, a megabyte: a 400 before any statement
            return refusal(exc)
        back = HttpResponseRedirect(self.url("changelist"))
        outcome = per_row([name], self.pause_one if paused else self.resume_one)
        verb = "Paused" if paused else "Resumed"
        for key, state in outcome.done:
            self.log_operation(request, self.model(**{self.key_field: key}), f"{verb} through ultimate_jobs.operator")
            if not state.declared:
                messages.warning(request, f"Nothing in this process declares the {self.noun} {key!r} — a typo?")
        report(request, outcome, did=verb, noun=self.noun, describe=str)
        return back


@admin.register(Queue)
class QueueAdmin(PausableAdmin):
    """Every queue with rows, a declaration or a pause: depth, oldest due age, running, dead, paused."""

    page_template = "admin/ultimate_jobs/queues.html"
    noun = "queue"
    key_field = "queue"

    def pause_one(self, name: str) -> PauseState:
        return operator.pause_queue(name)

    def resume_one(self, name: str) -> PauseState:
        return operator.resume_queue(name)

    def read(self, request: HttpRequest) -> list[Any]:
        return operator.inspect_queues()

    def rows(self, found: list[Any], now: int) -> list[dict[str, Any]]:
        jobs = self.url("changelist", model="job")
        dead = self.url("changelist", model="deadletter")
        rows = []
        for q in found:
            age = None if q.oldest_ready_ms is None else max(0, now - q.oldest_ready_ms)
            rows.append(
                {
                    "row": q,
                    "depth": q.ready + q.delayed,  # what waits for a worker: the metrics' queue_depth
                    "age_ms": age,
                    "late": age is not None and age >= LATE_MS,
                    "jobs_url": f"{jobs}?{urlencode({'queue': q.queue})}",
                    "dead_url": f"{dead}?{urlencode({'queue': q.queue})}",
                    "running_url": f"{jobs}?{urlencode({'queue': q.queue, 'state__exact': 'running'})}",
                }
            )
        return rows


@admin.register(Worker)
class WorkerAdmin(OverviewAdmin):
    """The live workers: host and pid, queues served, slots in use, the jobs they hold, last heartbeat."""

    page_template = "admin/ultimate_jobs/workers.html"
    noun = "worker"

    def read(self, request: HttpRequest) -> list[Any]:
        return operator.inspect_workers()

    def rows(self, found: list[Any], now: int) -> list[dict[str, Any]]:
        return [
            {
                "row": w,
                "used": len(w.in_flight),
                "percent": f"{min(100.0, len(w.in_flight) * 100 / w.slots):.0f}" if w.slots else "0",
                "stale": now - w.heartbeat_at_ms >= STALE_BEAT_MS,
                "jobs": [(job_id, self.url("change", job_id, model="job")) for job_id in w.in_flight],
            }
            for w in sorted(found, key=lambda w: (w.host, w.pid, w.id))
        ]


@admin.register(RateSchedule)
class RateAdmin(OverviewAdmin):
    """The rate limits: each declared limit, each key's next start across the fleet, the runs waiting."""

    page_template = "admin/ultimate_jobs/rates.html"
    noun = "rate limit"

    def read(self, request: HttpRequest) -> list[Any]:
        return operator.inspect_rates()

    def rows(self, found: list[Any], now: int) -> list[dict[str, Any]]:
        return [{"row": r, "busy": r.next_at_ms is not None and r.next_at_ms > now} for r in found]


@admin.register(ScheduledTask)
class TaskAdmin(PausableAdmin):
    """Every task: cron and time zone, next run, last fire, catch-up policy, paused."""

    page_template = "admin/ultimate_jobs/tasks.html"
    noun = "task"
    key_field = "task"

    def pause_one(self, name: str) -> PauseState:
        return operator.pause_task(name)

    def resume_one(self, name: str) -> PauseState:
        return operator.resume_task(name)

    def read(self, request: HttpRequest) -> list[Any]:
        return operator.inspect_tasks()

    def rows(self, found: list[Any], now: int) -> list[dict[str, Any]]:
        rows = []
        for t in found:
            local = None
            if t.descriptor is not None and t.next_run_ms is not None:
                at = datetime.fromtimestamp(t.next_run_ms / 1000, tz=ZoneInfo(t.descriptor.tz))
                local = at.strftime("%Y-%m-%d %H:%M %Z")  # the wall clock the cron is written in
            rows.append({"row": t, "next_local": local})
        return rows
