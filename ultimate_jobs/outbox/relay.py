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
rows (``manage.py jobs outbox``, the admin's outbox page). A pass that
throws is logged ``jobs.outbox.tick-failed`` and the loop re-arms. While there is work the loop claims
every ``interval`` (200 ms) — at once after a pass that published a full batch, so a backlog drains at
the statements' pace — and while idle the wait doubles to the ceiling; the store's wake cuts it short.

The relay knows only ``enqueue_many``: it publishes onto whatever driver it is handed.

One lifecycle, as the worker's: :meth:`OutboxRelay.start`, :meth:`OutboxRelay.stop` (joins the pass in
flight; a deadline binds late), :meth:`OutboxRelay.accept` / :meth:`OutboxRelay.close` (the two drain
phases), :meth:`OutboxRelay.run` (a command's blocking run with SIGTERM/SIGINT drain) and
:meth:`OutboxRelay.run_once`, one pass, which tests drive directly.
"""

from __future__ import annotations

import logging
import os
import signal as os_signal
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from django import db

from ..clock import Clock
from ..conf import job_clock
from ..dbconn import close_thread_connections, release_stale_connections
from ..drivers.base import MAX_BULK_ROWS, Enqueued, JobDriver
from ..durations import Duration, parse_duration
from ..errors import InvariantError, UltimateError, retry_class
from ..lifecycle import DEFAULT_DRAIN_DEADLINE_MS
from ..logs import log_event
from ..polling import idle_ceiling_for
from .store import OutboxRecord, OutboxStore, publish_request

RELAY_INTERVAL_MS = 200
RELAY_BATCH_SIZE = 100
STOP_POLL_S = 0.05  # how often a stop waiting on a pass re-reads its (late-bound) deadline
LOOP_JOIN_S = 5.0

RelayState = Literal["idle", "running", "draining", "stopped"]


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
    tick_failures: int = 0


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass: rows claimed, published (and marked), released after a failed publish."""

    claimed: int = 0
    published: int = 0
    released: int = 0


class OutboxRelay:
    """A relay from ``store`` onto ``driver``. Build it with :func:`outbox_relay`."""

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
        self.interval_ms = interval_ms
        self.idle_poll_max_ms = idle_poll_max_ms
        self.batch_size = batch_size
        self.drain_deadline_ms = drain_deadline_ms
        self.relay_id = relay_id
        self.state: RelayState = "idle"
        self.stats = RelayStats()
        self._cond = threading.Condition()
        self._pass_lock = threading.Lock()  # one pass at a time, whoever calls run_once
        self._in_pass = False
        self._accepting = True
        self._deadline_at: int | None = None
        self._wake = threading.Event()
        self._loop_thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._drain_requested = threading.Event()
        self._stopped = threading.Event()
        self._teardown_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<OutboxRelay {self.relay_id} {self.store.name}→{self.driver.name} {self.state}>"

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, *, loop: bool = True) -> None:
        """Subscribe to the store's wake and start the loop (``loop=False`` leaves passes to
        :meth:`run_once`, as tests do)."""
        with self._cond:
            if self.state != "idle":
                raise InvariantError(f"relay {self.relay_id} is {self.state}; build a new one to start again", {})
            self.state = "running"
            self._accepting = True
        subscribe = getattr(self.store, "subscribe", None)
        if callable(subscribe):
            self._unsubscribe = subscribe(self._on_wake)
        log_event(
            logging.INFO,
            "jobs.outbox.relay.started",
            relay_id=self.relay_id,
            store=self.store.name,
            driver=self.driver.name,
            batch_size=self.batch_size,
        )
        if loop:
            self._loop_thread = threading.Thread(target=self._loop, name=f"jobs-relay-{self.relay_id}", daemon=True)
            self._loop_thread.start()

    def run(self, *, install_signals: bool = True) -> None:
        """Start, then block until a SIGTERM/SIGINT drain (or :meth:`stop`) has finished. For commands;
        ``install_signals=False`` opts out of the drain hooks for a caller that drives its own teardown."""
        if install_signals:
            for signum in (os_signal.SIGTERM, os_signal.SIGINT):
                os_signal.signal(signum, self._on_signal)
        self.start()
        while not self._stopped.is_set():
            if self._drain_requested.wait(timeout=0.5):
                self.close(self.drain_deadline_ms)
        log_event(logging.INFO, "jobs.outbox.relay.stopped", relay_id=self.relay_id)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.accept(reason=os_signal.Signals(signum).name)
        self._drain_requested.set()

    def accept(self, *, reason: str = "stop") -> None:
        """The drain's first phase: stop polling. Returns at once; the pass in flight carries on."""
        with self._cond:
            if not self._accepting:
                return
            self._accepting = False
            if self.state in ("idle", "running"):
                self.state = "draining"
            in_pass = self._in_pass
        self._wake.set()
        log_event(logging.INFO, "jobs.outbox.relay.draining", relay_id=self.relay_id, signal=reason, in_pass=in_pass)

    def close(self, deadline_ms: int | None) -> bool:
        """The drain's second phase: wait out the pass in flight for up to ``deadline_ms`` (``None`` = as
        long as it takes), then stop. Answers whether the pass finished."""
        return self.stop(None if deadline_ms is None else self.clock.now_ms() + deadline_ms)

    def drain(self, deadline_ms: int | None = None, *, reason: str = "drain") -> bool:
        """Both phases, as SIGTERM runs them, within the drain deadline."""
        self.accept(reason=reason)
        return self.close(self.drain_deadline_ms if deadline_ms is None else deadline_ms)

    def stop(self, deadline_at_ms: int | None = None) -> bool:
        """Stop polling and JOIN the pass in flight — a pass is a publish followed by a mark, and a
        caller that returned between the two would close the database under the row it was about to
        mark. ``deadline_at_ms`` (a clock instant) bounds the wait and binds LATE: a later ``stop(d)``
        — a shutdown landing on a manual stop — bounds the wait already in flight, and the earliest
        deadline wins. Answers whether the pass finished (``False``: ``jobs.outbox.drain-abandoned``)."""
        with self._cond:
            if deadline_at_ms is not None:
                current = self._deadline_at
                self._deadline_at = deadline_at_ms if current is None else min(current, deadline_at_ms)
                self._cond.notify_all()
        self.accept(reason="stop")
        with self._cond:
            while self._in_pass:
                deadline = self._deadline_at
                if deadline is None:
                    self._cond.wait(STOP_POLL_S)
                    continue
                remaining_ms = deadline - self.clock.now_ms()
                if remaining_ms <= 0:
                    break
                self._cond.wait(min(remaining_ms / 1000, STOP_POLL_S))
            finished = not self._in_pass
        self._teardown(finished)
        return finished

    def _teardown(self, finished: bool) -> None:
        with self._teardown_lock:
            if self._stopped.is_set():
                return
            if not finished:
                log_event(logging.ERROR, "jobs.outbox.drain-abandoned", relay_id=self.relay_id)
            self._wake.set()
            thread = self._loop_thread
            if finished and thread is not None and thread is not threading.current_thread():
                thread.join(LOOP_JOIN_S)
            if self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None
            with self._cond:
                self.state = "stopped"
            self._stopped.set()

    # -- the loop ------------------------------------------------------------------------------

    def kick(self) -> None:
        """Ask for one pass now; a kick during a pass asks for one more behind it, never a second loop."""
        self._wake.set()

    def _on_wake(self, _payload: str) -> None:
        self.kick()

    def idle_ceiling_ms(self) -> int:
        """Where an idle loop's doubling wait stops: the declared ``idle_poll_max`` when set, else 5 s while
        the store's wake is proven (``store.wake_is_live()``) and 2 s otherwise — read every pass."""
        if self.idle_poll_max_ms:
            return self.idle_poll_max_ms
        wake_is_live = getattr(self.store, "wake_is_live", None)
        live = False
        if callable(wake_is_live):
            try:
                live = bool(wake_is_live())
            except Exception as exc:  # an unanswerable wake is an unproven one: the poll still guarantees pickup
                log_event(logging.WARNING, "jobs.outbox.wake-check-failed", relay_id=self.relay_id, error=repr(exc))
        return idle_ceiling_for(None, wake_live=live)

    def _loop(self) -> None:
        wait_ms = self.interval_ms
        try:
            while self._accepting:
                self._wake.clear()
                release_stale_connections()
                try:
                    result = self._run_pass()
                except Exception as exc:  # an unobserved failure would end the loop with rows still staged
                    self.stats.tick_failures += 1
                    log_event(logging.ERROR, "jobs.outbox.tick-failed", relay_id=self.relay_id, error=repr(exc))
                    result = PassResult()
                if result.published >= self.batch_size:
                    continue  # a full batch went out: a backlog is waiting, so pass again at once
                wait_ms = self.interval_ms if result.claimed else min(wait_ms * 2, self.idle_ceiling_ms())
                if self._wake.wait(wait_ms / 1000):
                    wait_ms = self.interval_ms  # woken: pass now, then at the floor again
        finally:
            close_thread_connections()

    # -- one pass ------------------------------------------------------------------------------

    def run_once(self) -> int:
        """One pass: claim a batch, publish it in order, mark what was published, release the rest.
        Answers how many rows it published. A failure of the store itself propagates (the loop logs it
        as ``jobs.outbox.tick-failed``); a failed publish does not."""
        return self._run_pass().published

    def _run_pass(self) -> PassResult:
        with self._pass_lock:
            with self._cond:
                if not self._accepting:
                    return PassResult()
                self._in_pass = True
            try:
                self.stats.passes += 1
                return self._pass()
            finally:
                with self._cond:
                    self._in_pass = False
                    self._cond.notify_all()

    def _pass(self) -> PassResult:
        records = self.store.claim(claimant=self.relay_id, limit=self.batch_size)
        if not records:
            return PassResult()
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
        return PassResult(claimed=len(records), published=published, released=released)

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

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until the relay reached ``stopped`` (tests); answers whether it did in ``timeout`` seconds."""
        return self._stopped.wait(timeout)


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
