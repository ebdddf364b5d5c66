"""Enqueue routing. With nothing installed, every enqueue publishes straight to the driver; the
outbox installs a router that stages the row in the caller's transaction instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from asgiref.sync import AsyncToSync, sync_to_async

from ..contracts.jobs import Enqueued, EnqueueRequest
from ..guards.admission import check_request
from .installed import job_driver


class JobsRouter(Protocol):
    """Where ``handle.enqueue()`` sends a row."""

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        """Write or stage one row; answer the job's own ids."""

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """Write or stage many rows in one round trip."""

    async def aenqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """:meth:`enqueue_many` from async code (:func:`aenqueue_many` says where it runs)."""


def called_from_sync_code() -> bool:
    """Whether this async code was entered from sync code (``async_to_sync``) whose thread waits on it — and
    may hold ``transaction.atomic()``, which only that thread's connection can join.

    Read off asgiref's own record of that thread (``AsyncToSync.executors.current``, what its
    ``sync_to_async(thread_sensitive=True)`` sends calls to); tests/postgres/test_async_enqueue.py and the
    outbox tests fail should an asgiref release move it."""
    return getattr(AsyncToSync.executors, "current", None) is not None


async def aenqueue_many(router: JobsRouter, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
    """Write (or stage) ``requests`` from async code: when a sync caller waits on this code
    (:func:`called_from_sync_code`), the sync enqueue runs on that caller's thread (Django's thread-sensitive
    one), so it joins the caller's transaction; otherwise the router's own ``aenqueue_many`` — on the
    driver's native async enqueue when it has one (``driver.async_enqueue``), no thread hop."""
    if called_from_sync_code():
        return await sync_to_async(router.enqueue_many, thread_sensitive=True)(requests)
    return await router.aenqueue_many(requests)


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

    async def aenqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """On the driver's native async enqueue, or — a driver without one — :meth:`enqueue_many` on Django's
        thread-sensitive thread."""
        native = job_driver().async_enqueue
        if native is None:
            return await sync_to_async(self.enqueue_many, thread_sensitive=True)(requests)
        for request in requests:
            check_request(request)
        return await native.enqueue_many(requests)


_router: JobsRouter | None = None


def jobs_router() -> JobsRouter:
    """The installed router, or the direct fallback."""
    return _router or DirectRouter()


def set_jobs_router(router: JobsRouter | None) -> None:
    """Install ``router`` (``None`` restores the direct fallback)."""
    global _router
    _router = router
