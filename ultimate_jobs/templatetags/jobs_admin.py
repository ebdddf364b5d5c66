"""``{% load jobs_admin %}``: times, durations, badges and ids on the admin pages, the same way the list
columns show them (:mod:`ultimate_jobs.admin._format`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils.safestring import SafeString

from ..admin import _format

register = template.Library()


@register.simple_tag
def when(value: int | datetime | None, now_ms: int | None = None) -> SafeString:
    """``{% when job.created_at_ms now_ms %}``: the relative age, the instant as its tooltip."""
    return _format.time_html(value, now_ms)


@register.filter
def absolute(value: int | datetime | None) -> str:
    """``{{ ms|absolute }}``: ``2026-01-01 09:30:00 UTC``."""
    return _format.absolute_text(value)


@register.filter
def duration(ms: int | float | None) -> str:
    """``{{ step.duration_ms|duration }}``: ``1.2 s``."""
    return _format.duration_text(ms)


@register.filter
def badge(state: str | None, label: str | None = None) -> SafeString:
    """``{{ job.state|badge }}``: a coloured pill."""
    return _format.badge_html(state, label)


@register.filter
def job_id(value: Any) -> SafeString:
    """``{{ job.id|job_id }}``: the whole id, monospace."""
    return _format.id_html(value)


@register.filter
def code(value: str | None) -> SafeString:
    """``{{ error.code|code }}``: an error code in monospace."""
    return _format.code_html(value)


@register.filter
def compact(value: Any) -> str:
    """``{{ step.output|compact }}``: one line of JSON, cut at 120 characters."""
    return _format.compact_json(value)
