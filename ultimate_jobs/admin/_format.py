"""How the admin shows times, durations, states and ids — shared by the list columns (Python) and the
page templates (the ``jobs_admin`` template tags).

Ages are measured against the job clock (``job_clock()``), the clock the driver stamps rows with, so a
page and the rows it shows never disagree about "now".
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from ..core.installed import job_clock

STATES = ("ready", "delayed", "running", "suspended", "done", "failed", "dead", "cancelled")
STEP_STATUSES = ("done", "failed", "sleeping", "waiting", "running")
EMPTY = mark_safe('<span class="uj-quiet">—</span>')  # a constant: nothing to escape


def now_ms() -> int:
    """The job clock's now, in epoch ms."""
    return job_clock().now_ms()


def to_ms(value: int | datetime | None) -> int | None:
    """Epoch ms from epoch ms or an aware datetime."""
    if value is None or isinstance(value, int):
        return value
    return int(value.timestamp() * 1000)


def to_datetime(ms: int | None) -> datetime | None:
    """An aware UTC datetime from epoch ms."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def duration_text(ms: int | float | None) -> str:
    """``850 ms``, ``1.2 s``, ``3 min 4 s``, ``2 h 5 min``, ``3 d 4 h``; an em dash for none."""
    if ms is None:
        return "—"
    ms = abs(int(ms))
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{int(seconds)} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def age_text(value: int | datetime | None, now: int | None = None) -> str:
    """``42 s ago``, ``10 min ago``, ``in 1 h 53 min``, ``just now``; an em dash for none. Past a minute
    the seconds are dropped: an age is read at a glance."""
    at = to_ms(value)
    if at is None:
        return "—"
    delta = (now if now is not None else now_ms()) - at
    if abs(delta) < 1000:
        return "just now"
    size = abs(delta)
    text = duration_text(size if size < 60_000 else size - size % 60_000)
    return f"{text} ago" if delta > 0 else f"in {text}"


def absolute_text(value: int | datetime | None) -> str:
    """The instant in the current Django time zone, to the second: ``2026-01-01 09:30:00 UTC``."""
    at = to_datetime(to_ms(value))
    if at is None:
        return "—"
    local = timezone.localtime(at)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


def time_html(value: int | datetime | None, now: int | None = None) -> SafeString:
    """A ``<time>``: the relative age, the absolute instant as its tooltip."""
    at = to_datetime(to_ms(value))
    if at is None:
        return EMPTY
    return format_html(
        '<time datetime="{}" title="{}">{}</time>', at.isoformat(), absolute_text(at), age_text(value, now)
    )


def badge_html(state: str | None, label: str | None = None) -> SafeString:
    """A coloured pill for a job state, a step status, or ``paused``/``active``."""
    if not state:
        return EMPTY
    return format_html('<span class="uj-badge uj-badge-{}">{}</span>', state, label or state)


def id_html(value: object) -> SafeString:
    """A job or run id in monospace, whole: ids are UUIDv7, whose first characters are the creation
    time — jobs enqueued within a minute share them, so a shortened id would name several jobs."""
    return format_html('<code class="uj-id">{}</code>', value)


def code_html(code: str | None) -> SafeString:
    """An error code in monospace (``X_JOB_TIMEOUT``), or an em dash."""
    if not code:
        return EMPTY
    return format_html('<code class="uj-code">{}</code>', code)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON for a ``<pre>`` (non-JSON values by their ``str``)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def compact_json(value: Any, limit: int = 120) -> str:
    """``value`` as one line of JSON, cut to ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
