"""Enqueue routing. With nothing installed, every enqueue publishes straight to the driver; the
outbox installs a router that stages the row in the caller's transaction instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..drivers.records import Enqueued, EnqueueRequest
from ..guards.admission import check_request
from .installed import job_driver


class JobsRouter(Protocol):
    """Where ``handle.enqueue()`` sends a row."""

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        """Write or stage one row; answer the job's own ids."""

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Write or stage many rows in one round trip."""


class DirectRouter:
    """The fallback: publish to :func:`job_driver` at the call — not transactional. Every request passes
    :func:`~ultimate_jobs.guards.admission.check_request` first."""

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        check_request(request)
        return job_driver().enqueue(request)

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        for request in requests:
            check_request(request)
        return job_driver().enqueue_many(requests)


_router: JobsRouter | None = None


def jobs_router() -> JobsRouter:
    """The installed router, or the direct fallback."""
    return _router or DirectRouter()


def set_jobs_router(router: JobsRouter | None) -> None:
    """Install ``router`` (``None`` restores the direct fallback)."""
    global _router
    _router = router
