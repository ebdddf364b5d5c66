"""Build the worker role from ``settings.ULTIMATE_JOBS`` (what ``jobs_worker`` and ``jobs_dev`` run)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.utils.module_loading import import_string

from ..conf import job_driver, jobs_settings
from ..durations import Duration
from ..errors import InvariantError
from ..sync_only import refuse_async
from .build import job_worker
from .runtime import JobWorker


def context_factory(path: str | None) -> Callable[[], Any]:
    """The ctx factory ``ULTIMATE_JOBS['CONTEXT']`` names (a dotted path to a zero-argument callable);
    with none configured every run gets ``ctx=None``."""
    if path is None:
        return lambda: None
    factory = import_string(path)
    if not callable(factory):
        raise InvariantError(f"ULTIMATE_JOBS['CONTEXT'] = {path!r} is not callable", {"path": path})
    refuse_async(factory, what=f"ULTIMATE_JOBS['CONTEXT'] = {path!r}", meta={"path": path})
    return factory  # type: ignore[no-any-return]


def parse_concurrency(values: list[str] | None) -> int | dict[str, int] | None:
    """``--concurrency 4`` or ``--concurrency emails=2 --concurrency default=8``."""
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        if not (values[0].strip().isascii() and values[0].strip().isdigit()):
            raise InvariantError(f"--concurrency {values[0]!r}: write N, or queue=N per queue", {"value": values[0]})
        return int(values[0])
    table: dict[str, int] = {}
    for value in values:
        queue, sep, slots = value.partition("=")
        if not sep or not queue or not (slots.isascii() and slots.isdigit()):
            raise InvariantError(f"--concurrency {value!r}: write N, or queue=N per queue", {"value": value})
        table[queue] = int(slots)
    return table


def worker_from_settings(
    *,
    queues: list[str] | None = None,
    concurrency: int | Mapping[str, int] | None = None,
    drain_deadline: Duration | None = None,
) -> JobWorker:
    """A worker over the configured driver, ctx factory, queues, limits and drain deadline."""
    config = jobs_settings()
    return job_worker(
        driver=job_driver(),
        context=context_factory(config.context),
        queues=queues,
        concurrency=concurrency if concurrency is not None else (config.queues or None),
        limits=config.limits,
        visibility_timeout=config.visibility_timeout_ms,
        drain_deadline=drain_deadline if drain_deadline is not None else config.drain_deadline_ms,
    )
