"""What the job pages render from operator records: one job's page (``operator.inspect_job``) and the
retry-from-step form's choices."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.urls import NoReverseMatch, reverse

from ..contracts.jobs import LIVE_STATES
from ..operator import JobDetail
from ._format import pretty_json

FINISHED_STATES = ("done", "failed", "dead", "cancelled")


def job_page(detail: JobDetail, now: int, url: Callable[..., str]) -> dict[str, Any]:
    """The job page's context: the row, a timeline of its steps (bars placed on the run's span), the
    error, progress and attempts, and which actions apply to its state. ``url(name, *args)`` reverses
    one of the page's admin URLs."""
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
        "act_url": url("act", job.id),
        "history_url": url("history", job.id),
        "changelist_url": url("changelist"),
        "json_url": json_url,
        "backfill": detail.backfill,
        "backfills_url": url("changelist", model="backfill") if detail.backfill else None,
    }


def step_choices(details: Sequence[JobDetail]) -> dict[str, Any]:
    """Each selected job with its steps, and every step name among them in the order the runs started
    them — the choices of the retry-from-step form."""
    order: dict[str, int] = {}
    picked = []
    for detail in details:
        for step in detail.steps:
            order[step.name] = min(order.get(step.name, step.seq), step.seq)
        picked.append({"row": detail.job, "steps": [s.name for s in detail.steps]})
    return {"picked": picked, "step_names": sorted(order, key=lambda n: (order[n], n))}
