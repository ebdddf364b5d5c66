"""The worker's record of one running attempt, and the heartbeat that keeps every lease alive."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..contracts.jobs import ClaimedJob, Heartbeat
from ..core.logs import log_event
from ..core.signals import CancelSignal
from ..errors import JobSlotLostError, LeaseLostError
from ..runtime.counters import JOB_LEASES_LOST

if TYPE_CHECKING:
    from .runtime import JobWorker


@dataclass(slots=True)
class InFlight:
    """One attempt this worker holds: its claim, its abort line, its last landed renewal, its slot."""

    job: ClaimedJob
    signal: CancelSignal
    last_renewed_ms: int
    slots: list[tuple[str, str]] = field(default_factory=list)  # the fleet slots it holds: (key, holder)
    settling: bool = False
    lost: bool = False
    slot_alive: Callable[[], bool] | None = None
    """While a slot runs the attempt: whether that slot (its thread, or the event loop's) still lives — the
    heartbeat renews no lease for a run whose slot died (:func:`give_back`)."""
    on_loop: bool = False  # an async run (its slot is one of the event loop's)
    slot_dead: bool = False  # the heartbeat found its slot dead and ended the flight: nothing more to account

    def fields(self) -> dict[str, Any]:
        j = self.job
        return {"job_id": j.id, "name": j.name, "queue": j.queue, "attempt": j.attempt, "run_id": j.run_id}


class _Hooks:
    """Adapts an :class:`InFlight` to the executor's hooks; ``keeper`` answers whether the worker keeps a
    run whose start is reserved for later (``None``: it never does)."""

    def __init__(self, flight: InFlight, keeper: Callable[[InFlight], bool] | None) -> None:
        self._flight = flight
        self._keeper = keeper

    def slot_taken(self, key: str, holder: str) -> None:
        self._flight.slots.append((key, holder))

    def settling(self) -> None:
        self._flight.settling = True

    def keep(self, until_ms: int) -> bool:
        return self._keeper is not None and self._keeper(self._flight)


def hooks_for(flight: InFlight, keeper: Callable[[InFlight], bool] | None = None) -> _Hooks:
    """The executor hooks that report into ``flight``."""
    return _Hooks(flight, keeper)


def give_back(worker: JobWorker, flight: InFlight, why: str, **fields: Any) -> None:
    """The run left its slot with nobody to settle it — a slot thread that died, or job code around the body
    (its context factory, an input validator, ``on_settled``) that raised a ``BaseException`` through the
    executor: log ``jobs.worker.slot-died`` with the job's name, and give its lease back at once (renewed to
    end now, fenced on the claim — a no-op when the row had settled). The queue claims it again as a lapsed
    lease: the attempt is spent, and a final one is dead-lettered by that claim."""
    flight.lost = True
    log_event(logging.ERROR, "jobs.worker.slot-died", why=why, **fields, **flight.fields())
    try:
        worker.driver.heartbeat([Heartbeat(flight.job.id, flight.job.ref)], visibility_timeout_ms=0)
    except Exception as exc:  # the lease lapses at the end of its window instead
        log_event(logging.ERROR, "jobs.worker.hand-back-failed", error=repr(exc), job_id=flight.job.id)


def renew_round(worker: JobWorker) -> None:
    """One heartbeat round: every in-flight lease in one batched call, then every fleet slot — except a run
    whose slot died, which the worker gives back instead (:meth:`~.runtime.JobWorker.slot_died`).

    A renewal that raised is ``jobs.heartbeat.failed`` while the window still has room; once a whole
    visibility window passed with none landing it is ``jobs.lease.lost`` (+ ``job_leases_lost_total``)
    and the body is aborted with ``X_JOB_LEASE_LOST``. A renewal the fence refused means the row is no
    longer this claim's (cancelled, or re-claimed elsewhere): abort at once. Neither fires for a job
    whose settle has begun — but its lease is still renewed until the settle came back: a settle held
    up on the wire (a loaded database, a flush behind others) must not let the lease lapse under a body
    that already ran, or the queue would deliver it again. The fence makes a renewal that crosses the
    settle a no-op.
    """
    flights = []
    for flight in worker.in_flight():
        alive = flight.slot_alive
        if alive is not None and not alive() and not flight.lost:
            worker.slot_died(flight)
        elif not flight.lost:
            flights.append(flight)
    if not flights:
        return
    beats = [Heartbeat(f.job.id, f.job.ref) for f in flights]
    try:
        renewed = worker.driver.heartbeat(beats, visibility_timeout_ms=worker.visibility_timeout_ms)
    except Exception as exc:
        now = worker.clock.now_ms()
        for flight in flights:
            if flight.settling:
                continue
            if now - flight.last_renewed_ms >= worker.visibility_timeout_ms:
                lease_lost(worker, flight, f"no renewal landed for a whole window ({exc!r})")
            else:
                log_event(logging.WARNING, "jobs.heartbeat.failed", error=repr(exc), **flight.fields())
        return
    now = worker.clock.now_ms()
    for flight in flights:
        if flight.job.id in renewed:
            flight.last_renewed_ms = now
        elif not flight.settling:
            _unowned(worker, flight)
    _renew_slots(worker, flights)


def _renew_slots(worker: JobWorker, flights: list[InFlight]) -> None:
    leases = worker.driver.leases
    if leases is None:
        return
    for flight in flights:
        for key, holder in flight.slots:
            if flight.settling or flight.lost:
                break
            if leases.renew(key, holder, ttl_ms=worker.visibility_timeout_ms) or flight.settling:
                continue
            flight.lost = True
            log_event(logging.ERROR, "jobs.worker.slot-lost", key=key, **flight.fields())
            flight.signal.abort(
                JobSlotLostError(
                    f"{flight.job.name}: the fleet slot {key} was taken by another worker while this run held it",
                    {"job_id": flight.job.id, "key": key},
                )
            )


def _unowned(worker: JobWorker, flight: InFlight) -> None:
    """The fence refused the renewal: the row was cancelled, or its lease lapsed and it was re-claimed."""
    operator_store = worker.driver.operator
    row = operator_store.get(flight.job.id) if operator_store is not None else None
    if row is not None and row.state == "cancelled":
        flight.lost = True
        log_event(logging.WARNING, "jobs.job.cancelled", **flight.fields())
        flight.signal.abort(
            LeaseLostError(
                f"{flight.job.name}: the job was cancelled while this worker ran it; stop and return",
                {"job_id": flight.job.id, "cancelled": True},
            )
        )
        return
    lease_lost(worker, flight, "the row is no longer held by this claim")


def lease_lost(worker: JobWorker, flight: InFlight, why: str) -> None:
    """Mark ``flight``'s lease lost, count it and abort its body with ``X_JOB_LEASE_LOST`` (once)."""
    if flight.lost:
        return
    flight.lost = True
    JOB_LEASES_LOST.labels(queue=flight.job.queue).inc()
    worker.stats.leases_lost += 1
    log_event(logging.ERROR, "jobs.lease.lost", why=why, **flight.fields())
    flight.signal.abort(
        LeaseLostError(
            f"{flight.job.name}: this worker lost the job's lease ({why}); another worker may run it now",
            {"job_id": flight.job.id},
        )
    )
