"""``outbox_relay()``: publish committed staged rows to the driver, in stage order, then retire them.

A pass: ``store.claim()`` a batch (``staged_at, id`` order), ``driver.enqueue_many()`` it with every
request under its row's own id — a repeat publish inserts nothing, live or finished — then
``store.mark_published()``. A publish that fails with a transient error (the database is away, a
lock timed out) stops the batch: the rows before it are marked, the failed row and every row behind it
are released at once (``jobs.outbox.publish-failed``), so later rows never overtake it and a pool blip
costs one poll interval, not a lease window. A publish that fails with a PERMANENT error — one no retry
can fix: the database refuses the request's data, or the request is invalid (:func:`is_permanent`) —
sets that one row aside (``failed``, with its error; ``jobs.outbox.row-set-aside``) and the rows
behind it publish: one bad row never wedges the outbox. An operator lists, retries or removes set-aside
rows (``manage.py jobs outbox``, the admin's outbox page). The loop is every role's
(:class:`ultimate_jobs.runtime.polling.PollingRole`): a pass that throws is logged
``jobs.outbox.relay.pass-failed`` and the loop carries on; while there is work it claims every
``interval`` (200 ms) — at once after a pass that published a full batch, so a backlog drains at the
statements' pace — and while idle the wait doubles to the ceiling; the store's wake cuts it short.

The relay knows only ``enqueue_many``: it publishes onto whatever driver it is handed.

The lifecycle is every role's (:class:`ultimate_jobs.runtime.lifecycle.RoleLifecycle`): ``start``, ``accept`` /
``close`` (the two drain phases; close joins the pass in flight — a pass is a publish followed by a
mark, and returning between the two would close the database under the row about to be marked),
``drain``, ``stop``, ``run`` (a command's blocking run with SIGTERM/SIGINT drain); :meth:`OutboxRelay.run_once`
is one pass, which tests drive directly.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from django import db

from ..contracts.jobs import Enqueued
from ..contracts.operator import MAX_BULK_ROWS
from ..contracts.outbox import OutboxRecord, OutboxStore, publish_request
from ..contracts.protocol import JobDriver
from ..core.clock import Clock
from ..core.durations import Duration, parse_duration
from ..core.installed import job_clock
from ..core.logs import log_event
from ..errors import InvariantError, UltimateError, retry_class
from ..runtime.lifecycle import DEFAULT_DRAIN_DEADLINE_MS
from ..runtime.polling import Pass, PollingRole

RELAY_INTERVAL_MS = 200
RELAY_BATCH_SIZE = 100


@dataclass(slots=True)
class RelayStats:
    """What this relay did since it was built."""

    passes: int = 0
    claimed: int = 0
    published: int = 0
    deduped: int = 0
    released: int = 0
    set_aside: int = 0
    publish_failures: int = 0
    claims_lost: int = 0
    pass_failures: int = 0


class OutboxRelay(PollingRole):
    """A relay from ``store`` onto ``driver``. Build it with :func:`outbox_relay`."""

    event_prefix = "jobs.outbox.relay"

    def __init__(
        self,
        *,
        store: OutboxStore,
        driver: JobDriver,
        clock: Clock,
        interval_ms: int,
        idle_poll_max_ms: int | None,
        batch_size: int,
        drain_deadline_ms: int,
        relay_id: str,
    ) -> None:
        self.store = store
        self.driver = driver
        self.clock = clock
        self.batch_size = batch_size
        self.drain_deadline_ms = drain_deadline_ms
        self.relay_id = relay_id
        self.stats = RelayStats()
        self._init_polling(poll_interval_ms=interval_ms, idle_poll_max_ms=idle_poll_max_ms)
        self._accepting = True  # an unstarted relay still runs passes by hand (run_once), until accept
        self._unsubscribe: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"<OutboxRelay {self.relay_id} {self.store.name}→{self.driver.name} {self.state}>"

    # -- the lifecycle's hooks (ultimate_jobs.runtime.lifecycle.RoleLifecycle) ---------------------------

    def _ident(self) -> dict[str, Any]:
        return {"relay_id": self.relay_id}

    def _begin(self) -> None:
        """Subscribe to the store's wake."""
        if self.store.supports_wake:
            self._unsubscribe = self.store.subscribe(self._on_wake)
        log_event(
            logging.INFO,
            "jobs.outbox.relay.started",
            relay_id=self.relay_id,
            store=self.store.name,
            driver=self.driver.name,
            batch_size=self.batch_size,
        )

    def _teardown(self, finished: bool) -> None:
        self._wake.set()
        if finished:
            self._join_loop()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    # -- the loop ------------------------------------------------------------------------------

    def _on_wake(self, _payload: str) -> None:
        self.kick()

    def _wake_is_live(self) -> bool:
        return self.store.supports_listen and bool(self.store.wake_is_live())

    def _pass_failed(self, error: Exception) -> None:
        self.stats.pass_failures += 1

    # -- one pass ------------------------------------------------------------------------------
    # A pass is a publish followed by a mark: the pass guard keeps close from releasing the database
    # between the two.

    def run_once(self) -> int:
        """One pass: claim a batch, publish it in order, mark what was published, release the rest.
        Answers how many rows it published. A failure of the store itself propagates (the loop logs it
        as ``jobs.outbox.relay.pass-failed``); a failed publish does not."""
        return self._guarded_pass().done

    def _one_pass(self) -> Pass:
        self.stats.passes += 1
        records = self.store.claim(claimant=self.relay_id, limit=self.batch_size)
        if not records:
            return Pass()
        self.stats.claimed += len(records)
        remaining, published, deduped, released, set_aside = records, 0, 0, 0, 0
        while remaining:
            answers, error = self._publish(remaining)
            done, rest = remaining[: len(answers)], remaining[len(answers) :]
            deduped += sum(1 for a in answers if a.deduped)
            if done:
                self._mark(done)
                published += len(done)
            if not rest:
                break
            if error is not None and is_permanent(error):
                self._set_aside(rest[0], error)
                set_aside += 1
                remaining = rest[1:]  # the rows behind it go out, still in order
                continue
            self._release(rest, error)
            released = len(rest)
            break
        self.stats.deduped += deduped
        log_event(
            logging.DEBUG,
            "jobs.outbox.published",
            relay_id=self.relay_id,
            published=published,
            deduped=deduped,
            released=released,
            set_aside=set_aside,
        )
        return Pass(done=published, worked=True, again=published >= self.batch_size)

    def _publish(self, records: list[OutboxRecord]) -> tuple[list[Enqueued], Exception | None]:
        """Publish in order; answers the answers of the published prefix and the error that stopped it.
        The whole batch goes in one ``enqueue_many``; only when that fails are the rows tried one at a
        time, so the rows before the failing one still go out and none behind it overtakes it."""
        requests = [publish_request(r) for r in records]
        try:
            return self.driver.enqueue_many(requests), None
        except Exception as exc:
            if len(records) == 1:
                return [], exc
        answers: list[Enqueued] = []
        for request in requests:
            try:
                answers.extend(self.driver.enqueue_many([request]))
            except Exception as exc:
                return answers, exc
        return answers, None

    def _mark(self, published: list[OutboxRecord]) -> None:
        by_token = _by_token(published)
        for token, ids in by_token.items():
            landed = self.store.mark_published(ids, claimed_by=token)
            self.stats.published += len(landed)
            lost = [i for i in ids if i not in landed]
            if lost:
                # Our lease lapsed and another relay reclaimed these rows: it retires them after its own
                # publish, which meets the job ours made (same id) and inserts nothing.
                self.stats.claims_lost += len(lost)
                log_event(logging.WARNING, "jobs.outbox.claim-lost", relay_id=self.relay_id, ids=lost, op="mark")

    def _log_failure(
        self, level: int, event: str, record: OutboxRecord, error: Exception | None, **fields: Any
    ) -> None:
        log_event(
            level, event, relay_id=self.relay_id, id=record.id, name=record.request.name, error=repr(error), **fields
        )

    def _set_aside(self, record: OutboxRecord, error: Exception) -> None:
        token = record.claimed_by or ""
        landed = self.store.set_aside([record.id], claimed_by=token, error=repr(error))
        self.stats.set_aside += len(landed)
        self._log_failure(logging.ERROR, "jobs.outbox.row-set-aside", record, error, landed=bool(landed))

    def _release(self, rest: list[OutboxRecord], error: Exception | None) -> None:
        first = rest[0]
        self.stats.publish_failures += 1
        self._log_failure(logging.WARNING, "jobs.outbox.publish-failed", first, error, released=len(rest))
        for token, ids in _by_token(rest).items():
            landed = self.store.release(ids, claimed_by=token, error=repr(error))
            self.stats.released += len(landed)
            lost = [i for i in ids if i not in landed]
            if lost:
                self.stats.claims_lost += len(lost)
                log_event(logging.WARNING, "jobs.outbox.claim-lost", relay_id=self.relay_id, ids=lost, op="release")


_PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    db.DataError,
    db.IntegrityError,
    psycopg.DataError,
    psycopg.IntegrityError,
    ValueError,
    TypeError,
    OverflowError,
    RecursionError,
)


def is_permanent(error: BaseException) -> bool:
    """Whether publishing the row again can never succeed: the database refuses its data (out of range,
    a NUL byte, a constraint), the request cannot be built from it, or a coded error classified
    terminal (``X_VALIDATION``…). A lost connection, a timeout or anything unknown is transient."""
    if isinstance(error, UltimateError):
        return retry_class(error) == "terminal"
    return isinstance(error, _PERMANENT_ERRORS)


def _by_token(records: list[OutboxRecord]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for record in records:
        grouped.setdefault(record.claimed_by or "", []).append(record.id)
    return grouped


def outbox_relay(
    *,
    store: OutboxStore,
    driver: JobDriver,
    clock: Clock | None = None,
    interval: Duration = RELAY_INTERVAL_MS,
    idle_poll_max: Duration | None = None,
    batch_size: int = RELAY_BATCH_SIZE,
    drain_deadline: Duration = DEFAULT_DRAIN_DEADLINE_MS,
    relay_id: str | None = None,
) -> OutboxRelay:
    """Build a relay. ``store`` and ``driver`` are required; the relay publishes to the driver through
    ``enqueue_many`` only, so any driver works behind any store. Defaults: a claim every 200 ms while
    there is work, doubling to a 2 s idle ceiling (5 s while the store's wake is proven; a declared
    ``idle_poll_max`` is the ceiling either way), batches of 100, the 25 s drain deadline.

    >>> relay = outbox_relay(store=postgres_outbox_store(), driver=job_driver())
    >>> relay.start()
    >>> relay.stop()          # joins the pass in flight
    """
    if store is None or driver is None:
        raise InvariantError("outbox_relay(store=..., driver=...) needs both", {})
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BULK_ROWS:
        raise InvariantError(
            f"outbox_relay: batch_size must be a whole number in 1..{MAX_BULK_ROWS}, got {batch_size!r}", {}
        )
    interval_ms = parse_duration(interval, field="interval")
    idle_ms = parse_duration(idle_poll_max, field="idle_poll_max") if idle_poll_max is not None else None
    if interval_ms <= 0 or (idle_ms is not None and idle_ms < interval_ms):
        raise InvariantError(
            f"outbox_relay: interval ({interval_ms} ms) must be positive and idle_poll_max ({idle_ms} ms) at least it",
            {},
        )
    drain_ms = parse_duration(drain_deadline, field="drain_deadline")
    if drain_ms < 0:
        raise InvariantError(f"outbox_relay: drain_deadline must not be negative, got {drain_ms} ms", {})
    return OutboxRelay(
        store=store,
        driver=driver,
        clock=clock or job_clock(),
        interval_ms=interval_ms,
        idle_poll_max_ms=idle_ms,
        batch_size=batch_size,
        drain_deadline_ms=drain_ms,
        relay_id=relay_id or f"relay-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
    )
