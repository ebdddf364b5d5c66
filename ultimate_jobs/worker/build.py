"""``job_worker()``: a worker built from keyword options, every one checked (``X_INVARIANT`` naming the
option), with the defaults a Django team runs: every registered queue, 8 slots each, the driver's
visibility timeout renewed every third of it, a 250 ms poll."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..contracts.protocol import JobDriver
from ..core import registry
from ..core.clock import Clock
from ..core.definition import JobHandle
from ..core.durations import Duration, parse_duration
from ..core.installed import job_clock
from ..defaults import DEFAULT_ASYNC_CONCURRENCY, MAX_ASYNC_CONCURRENCY
from ..errors import ClaimQueuesEmptyError, InvariantError
from ..guards.limits import LimitConfig
from ..runtime.async_lane import event_loop_factory
from ..runtime.lifecycle import DEFAULT_DRAIN_DEADLINE_MS
from .runtime import JobWorker

JOBS_CONCURRENCY_DEFAULT = 8
CLAIM_AHEAD_PER_SLOT = 4  # the default claim-ahead buffer: this many claimed jobs per slot, at most CLAIM_AHEAD_MAX
CLAIM_AHEAD_MAX = 64
POLL_INTERVAL_MS = 250


def _slots_for(queues: Sequence[str], concurrency: int | Mapping[str, int] | None) -> dict[str, int]:
    def check(value: object, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvariantError(f"job_worker: {where} must be a whole number >= 1, got {value!r}", {})
        return value

    if concurrency is None:
        return dict.fromkeys(queues, JOBS_CONCURRENCY_DEFAULT)
    if isinstance(concurrency, int):
        return dict.fromkeys(queues, check(concurrency, "concurrency"))
    return {q: check(concurrency.get(q, JOBS_CONCURRENCY_DEFAULT), f"concurrency[{q!r}]") for q in queues}


def _async_slots_for(queues: Sequence[str], async_concurrency: int | Mapping[str, int] | None) -> dict[str, int]:
    """How many async jobs each queue runs at once on the worker's event loop: the declared number, else
    :data:`~ultimate_jobs.defaults.DEFAULT_ASYNC_CONCURRENCY` on a queue an async job names and 0 on the
    others (a queue of sync jobs claims exactly as before)."""

    def check(value: object, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ASYNC_CONCURRENCY:
            raise InvariantError(
                f"job_worker: {where} must be a whole number from 0 to {MAX_ASYNC_CONCURRENCY}, got {value!r}",
                {"field": "async_concurrency", "value": repr(value)},
            )
        return value

    declared = async_queues()
    if isinstance(async_concurrency, int):
        return dict.fromkeys(queues, check(async_concurrency, "async_concurrency"))
    table = async_concurrency or {}
    return {
        q: check(table[q], f"async_concurrency[{q!r}]")
        if q in table
        else (DEFAULT_ASYNC_CONCURRENCY if q in declared else 0)
        for q in queues
    }


def async_queues() -> frozenset[str]:
    """The queues a registered ``async def`` job names."""
    return frozenset(h.queue for h in registry.registered("job") if isinstance(h, JobHandle) and h.is_async)


def _claim_ahead_for(slots: Mapping[str, int], claim_ahead: int | Mapping[str, int] | None) -> dict[str, int]:
    def check(value: object, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvariantError(f"job_worker: {where} must be a whole number >= 0, got {value!r}", {})
        return value

    if claim_ahead is None:
        return {q: min(CLAIM_AHEAD_PER_SLOT * n, CLAIM_AHEAD_MAX) for q, n in slots.items()}
    if isinstance(claim_ahead, int):
        return dict.fromkeys(slots, check(claim_ahead, "claim_ahead"))
    return {
        q: check(claim_ahead.get(q, min(CLAIM_AHEAD_PER_SLOT * n, CLAIM_AHEAD_MAX)), f"claim_ahead[{q!r}]")
        for q, n in slots.items()
    }


def _visibility_for(driver: JobDriver, visibility_timeout: Duration | None) -> int:
    """The worker's lease window: the driver's own, one window per store — what its claims default to and
    what its registry expires workers on. A ``visibility_timeout`` that differs is refused rather than
    let the worker lease on one window while the driver judges it on another."""
    window = driver.visibility_timeout_ms
    if visibility_timeout is None:
        return window
    asked = parse_duration(visibility_timeout, field="visibility_timeout")
    if asked != window:
        raise InvariantError(
            f"job_worker(visibility_timeout={asked} ms) differs from the {driver.name!r} driver's window "
            f"({window} ms), on which the driver expires its workers. Leave visibility_timeout out, or build the "
            f"driver with visibility_timeout_ms={asked} (ULTIMATE_JOBS['VISIBILITY_TIMEOUT'] does that)",
            {"field": "visibility_timeout", "value": asked, "driver_window": window},
        )
    return window


def default_queues(concurrency: int | Mapping[str, int] | None = None) -> list[str]:
    """Every queue a registered job names, every queue the concurrency table names, every queue a
    ``django.tasks`` backend of ours serves (``settings.TASKS``), and ``default``."""
    names = {h.queue for h in registry.registered("job") if isinstance(h, JobHandle)} | {"default"}
    names |= registry.source_queues()
    if isinstance(concurrency, Mapping):
        names |= set(concurrency)
    return sorted(names)


def job_worker(
    *,
    driver: JobDriver,
    context: Callable[[], Any],
    queues: Sequence[str] | None = None,
    concurrency: int | Mapping[str, int] | None = None,
    async_concurrency: int | Mapping[str, int] | None = None,
    clock: Clock | None = None,
    visibility_timeout: Duration | None = None,
    heartbeat_interval: Duration | None = None,
    poll_interval: Duration = POLL_INTERVAL_MS,
    idle_poll_max: Duration | None = None,
    limits: LimitConfig | None = None,
    drain_deadline: Duration = DEFAULT_DRAIN_DEADLINE_MS,
    worker_id: str | None = None,
    claim_ahead: int | Mapping[str, int] | None = None,
    event_loop: str = "auto",
) -> JobWorker:
    """Build a worker. ``driver`` and ``context`` (a zero-argument factory of the ctx a run executes
    under) are required; everything else defaults: every registered queue, 8 slots per queue, the
    driver's visibility timeout (``driver.visibility_timeout_ms``; a ``visibility_timeout`` that differs
    from it is ``X_INVARIANT``) renewed every third of it, a 250 ms poll doubling to a 2 s idle ceiling (5 s while
    the driver's wake is proven; a declared ``idle_poll_max`` is the ceiling either way).

    ``async_concurrency`` is how many ``async def`` jobs run at once per queue on the worker's one event
    loop (a number for every queue, or a table): default 100 on a queue an async job names, 0 elsewhere.
    Async runs take no thread slot; sync jobs keep the ``concurrency`` threads.

    ``claim_ahead`` is how many claimed jobs a queue may hold beyond its slots, so a slot that frees
    takes its next job without waiting for a claim round trip (default: four per slot, at most 64; 0
    claims only for free slots). It applies while the queue's recent attempts average under 50 ms —
    behind longer bodies a buffered job would wait for a slot another worker has free. Buffered jobs'
    leases are renewed with the running ones; a drain hands them back to ready at once, uncounted.

    ``event_loop`` is the loop the async jobs run on: ``"auto"`` (uvloop when it is installed, else asyncio's
    own), ``"asyncio"`` or ``"uvloop"``.

    >>> worker = job_worker(driver=job_driver(), context=lambda: AppContext(), concurrency={"emails": 4})
    >>> worker.run()          # blocks; SIGTERM drains
    """
    if driver is None:
        raise InvariantError("job_worker(driver=...) is required", {})
    if not callable(context):
        raise InvariantError("job_worker(context=...) is required: a zero-argument factory of the run's ctx", {})
    names = list(queues) if queues is not None else default_queues(concurrency)
    if not names:
        raise ClaimQueuesEmptyError("job_worker(queues=[]) names no queue; pass at least one", {})
    visibility_ms = _visibility_for(driver, visibility_timeout)
    heartbeat_ms = (
        parse_duration(heartbeat_interval, field="heartbeat_interval")
        if heartbeat_interval is not None
        else max(1, visibility_ms // 3)
    )
    if visibility_ms <= 0 or heartbeat_ms <= 0 or heartbeat_ms >= visibility_ms:
        raise InvariantError(
            f"job_worker: heartbeat_interval ({heartbeat_ms} ms) must be positive and below visibility_timeout "
            f"({visibility_ms} ms)",
            {},
        )
    slots = _slots_for(names, concurrency)
    return JobWorker(
        driver=driver,
        context=context,
        queues=names,
        slots=slots,
        async_slots=_async_slots_for(names, async_concurrency),
        claim_ahead=_claim_ahead_for(slots, claim_ahead),
        clock=clock or job_clock(),
        visibility_timeout_ms=visibility_ms,
        heartbeat_interval_ms=heartbeat_ms,
        poll_interval_ms=parse_duration(poll_interval, field="poll_interval"),
        idle_poll_max_ms=parse_duration(idle_poll_max, field="idle_poll_max") if idle_poll_max is not None else None,
        limits=limits or LimitConfig(),
        drain_deadline_ms=parse_duration(drain_deadline, field="drain_deadline"),
        worker_id=worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
        new_loop=event_loop_factory(event_loop),
    )
