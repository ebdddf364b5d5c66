"""The one polling loop every role runs — the worker's claim loop, the outbox relay, the scheduler.

A role is a :class:`PollingRole`: it gives only "do one pass" (:meth:`PollingRole._one_pass`, answering a
:class:`Pass`: what it did, whether it found work, whether to go again at once), and this module owns
the rest — one pass at a time, the wait between passes, the wake, the failure log and the thread's
database connection.

Idle cost against pickup latency: while passes find work the loop waits the floor
(``poll_interval_ms``) between them; an idle pass — or one that failed — doubles the wait up to a
ceiling; a pass that says ``again`` (a full batch: a backlog is waiting) runs the next one at once; a
wake (:meth:`RoleLifecycle.kick`, a LISTEN notification) cuts the wait short and puts it back at the
floor. Undeclared, the ceiling is :data:`WOKEN_IDLE_POLL_CEILING_MS` (5 s) while a wake is proven to
deliver and :data:`IDLE_POLL_CEILING_MS` (2 s) otherwise; the poll is the guarantee, the wake is latency.
A pass that throws is logged ``<role>.pass-failed`` and the loop carries on.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from ..core.logs import log_event
from .dbconn import close_thread_connections, release_stale_connections
from .lifecycle import RoleLifecycle

IDLE_POLL_CEILING_MS = 2_000
"""The idle ceiling while no wake is proven."""

WOKEN_IDLE_POLL_CEILING_MS = 5_000
"""The idle ceiling while a wake is proven to deliver."""


def idle_ceiling_for(declared: int | None, *, wake_live: bool) -> int:
    """The idle ceiling: ``declared`` (``idle_poll_max``) when given, else 5 s while the wake is proven
    and 2 s otherwise.

    >>> idle_ceiling_for(None, wake_live=True)
    5000
    """
    if declared:
        return declared
    return WOKEN_IDLE_POLL_CEILING_MS if wake_live else IDLE_POLL_CEILING_MS


@dataclass(frozen=True, slots=True)
class Pass:
    """What one pass tells the loop: ``done`` (what ``run_once()`` answers — jobs dispatched, rows
    published, occurrences fired), ``worked`` (it found work: the next wait is the floor, not doubled)
    and ``again`` (go again at once, without waiting: a full batch left a backlog behind it)."""

    done: int = 0
    worked: bool = False
    again: bool = False


IDLE = Pass()


class PollingRole(RoleLifecycle):
    """A role whose loop is the shared poll. A role calls :meth:`_init_polling` in its ``__init__`` and
    fills in :meth:`_one_pass` (and :meth:`_wake_is_live` when it has a wake that can prove itself);
    :meth:`_guarded_pass` is what its ``run_once()`` calls."""

    poll_interval_ms: int
    """The floor: the wait between passes while they find work."""
    idle_poll_max_ms: int | None
    """The declared idle ceiling (``idle_poll_max``), or ``None`` for the wake's rule."""

    def _init_polling(self, *, poll_interval_ms: int, idle_poll_max_ms: int | None) -> None:
        self._init_lifecycle()
        self.poll_interval_ms = poll_interval_ms
        self.idle_poll_max_ms = idle_poll_max_ms
        self._pass_lock = threading.Lock()  # one pass at a time, whoever calls run_once
        self._in_pass = False

    # -- what a role fills in --------------------------------------------------------------------

    def _one_pass(self) -> Pass:
        """One pass of the role's work (called by :meth:`_guarded_pass` only)."""
        return IDLE

    def _wake_is_live(self) -> bool:
        """Whether the role's wake is proven to deliver now (may raise: then it is not)."""
        return False

    def _pass_failed(self, error: Exception) -> None:
        """Count a pass that threw (its log line is the loop's)."""

    # -- the pass guard --------------------------------------------------------------------------

    def _guarded_pass(self) -> Pass:
        """One pass, never two at once and never after the accept phase; ``close`` waits for a pass in
        flight (:meth:`_busy`), so nothing a pass holds is released under it."""
        with self._pass_lock:
            with self._cond:
                if not self._accepting:
                    return IDLE
                self._in_pass = True
            try:
                return self._one_pass()
            finally:
                with self._cond:
                    self._in_pass = False
                    self._cond.notify_all()

    def _busy(self) -> bool:
        return self._in_pass

    # -- the loop --------------------------------------------------------------------------------

    def idle_ceiling_ms(self) -> int:
        """Where an idle loop's doubling wait stops: the declared ``idle_poll_max`` when set, else 5 s while
        the wake is proven and 2 s otherwise — read every pass, so a wake that is lost drops the ceiling
        back at once."""
        if self.idle_poll_max_ms:
            return self.idle_poll_max_ms
        try:
            live = bool(self._wake_is_live())
        except Exception as exc:  # an unanswerable wake is an unproven one: the poll still guarantees pickup
            log_event(logging.WARNING, f"{self.event_prefix}.wake-check-failed", **self._ident(), error=repr(exc))
            live = False
        return idle_ceiling_for(None, wake_live=live)

    def next_wait_ms(self, previous_ms: int, result: Pass) -> int:
        """The wait after a pass: the floor when it found work, else the previous wait doubled, up to the
        idle ceiling."""
        if result.worked:
            return self.poll_interval_ms
        return max(self.poll_interval_ms, min(previous_ms * 2, self.idle_ceiling_ms()))

    def _wait(self, wait_ms: int) -> bool:
        """Wait ``wait_ms`` or until a wake; answers whether woken (the seam a frozen-clock test scripts)."""
        return self._wake.wait(wait_ms / 1000)

    def _loop(self) -> None:
        wait_ms = self.poll_interval_ms
        try:
            while self._accepting:
                self._wake.clear()
                release_stale_connections()  # a pass that broke the connection must not break every pass after
                try:
                    result = self._guarded_pass()
                except Exception as exc:  # an unobserved failure would end the loop with work still waiting
                    self._pass_failed(exc)
                    log_event(logging.ERROR, f"{self.event_prefix}.pass-failed", **self._ident(), error=repr(exc))
                    result = IDLE  # a failing store is not hammered: the wait doubles as if idle
                if result.again:
                    continue
                wait_ms = self.next_wait_ms(wait_ms, result)
                if self._wait(wait_ms):
                    wait_ms = self.poll_interval_ms  # woken: pass now, then at the floor again
        finally:
            close_thread_connections()  # the loop thread's one database connection goes with it
