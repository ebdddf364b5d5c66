"""Build the worker role from ``settings.ULTIMATE_JOBS`` (what ``jobs_worker`` and ``jobs_dev`` run)."""

from __future__ import annotations

from collections.abc import Mapping

from ..conf import context_factory, jobs_settings
from ..core.durations import Duration
from ..core.installed import job_driver
from ..errors import InvariantError
from .build import job_worker
from .runtime import JobWorker


def parse_concurrency(values: list[str] | None, *, flag: str = "--concurrency") -> int | dict[str, int] | None:
    """``--concurrency 4`` or ``--concurrency emails=2 --concurrency default=8`` (``flag`` names the flag
    in the refusal: ``--async-concurrency`` reads the same way)."""
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        if not (values[0].strip().isascii() and values[0].strip().isdigit()):
            raise InvariantError(f"{flag} {values[0]!r}: write N, or queue=N per queue", {"value": values[0]})
        return int(values[0])
    table: dict[str, int] = {}
    for value in values:
        queue, sep, slots = value.partition("=")
        if not sep or not queue or not (slots.isascii() and slots.isdigit()):
            raise InvariantError(f"{flag} {value!r}: write N, or queue=N per queue", {"value": value})
        table[queue] = int(slots)
    return table


def worker_from_settings(
    *,
    queues: list[str] | None = None,
    concurrency: int | Mapping[str, int] | None = None,
    async_concurrency: int | Mapping[str, int] | None = None,
    drain_deadline: Duration | None = None,
) -> JobWorker:
    """A worker over the configured driver, ctx factory, queues, slots (``QUEUES``), async slots
    (``ASYNC_CONCURRENCY``), limits and drain deadline; a flag's value wins over its setting."""
    config = jobs_settings()
    return job_worker(
        driver=job_driver(),
        context=context_factory(config.context),
        queues=queues,
        concurrency=concurrency if concurrency is not None else (config.queues or None),
        async_concurrency=async_concurrency if async_concurrency is not None else (config.async_concurrency or None),
        limits=config.limits,
        drain_deadline=drain_deadline if drain_deadline is not None else config.drain_deadline_ms,
        event_loop=config.event_loop,
    )
