"""One lifecycle for every long-running role — the worker, the scheduler, the outbox relay — and
several roles in one process (``jobs_dev``).

:class:`RoleLifecycle` is the one implementation: ``start()`` (``idle`` → ``running``), ``accept()``
(the drain's first phase: stop taking work, return at once — the worker also aborts its jobs' signals
with ``X_DRAINING``), ``close(deadline_ms)`` (the second phase: wait for the work in flight up to a
WALL-CLOCK deadline, then release everything → ``stopped``), ``drain()`` (both, within the role's
drain deadline), ``stop(deadline_ms=None)`` (close without the accept phase's aborts, bounded the same
way), ``run()`` (a command's blocking run: SIGTERM/SIGINT drain) and ``kick()``. A close already
waiting is shortened by a later one with a sooner bound (a shutdown landing on a manual stop); every
waiter answers the same verdict, and ``drain-abandoned`` is logged once. Each role keeps only its own
loop body, its idea of "work in flight" and its teardown.

:class:`Roles` runs several in one process: SIGTERM/SIGINT run every role's accept phase first, then
every close phase, all bounded by ONE drain deadline, so a role queued behind another's wait never
starts its own accept late.
"""

from __future__ import annotations

import logging
import signal as os_signal
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from ..core.logs import log_event
from ..defaults import DEFAULT_DRAIN_DEADLINE_MS as DEFAULT_DRAIN_DEADLINE_MS  # re-exported: the roles read it here
from ..errors import InvariantError

RoleState = Literal["idle", "running", "draining", "stopped"]
WAIT_POLL_S = 0.05
"""How often a close waiting on work in flight re-reads its (late-bound) deadline."""
SIGNAL_POLL_S = 0.1
"""How often a command's blocking ``run()`` acts on a signal its handler noted. A handler only notes it:
one that took a lock (an ``Event.set()``, a log line) could run while the main thread holds that lock —
a second signal inside the first one's handler does, as Ctrl-C plus a supervisor's SIGTERM send — and
deadlock the process it was meant to stop."""


class RoleLifecycle:
    """The lifecycle every role shares; a role subclasses it and fills in the hooks below.

    A role calls :meth:`_init_lifecycle` in its ``__init__``, guards its state with ``self._cond`` (a
    ``Condition``, notified whenever work in flight ends), reads ``self._accepting`` in its loop and
    waits on ``self._wake`` between passes.
    """

    event_prefix = "jobs.role"
    """Log events are ``<prefix>.draining``, ``<prefix>.drain-abandoned``, ``<prefix>.stopped``."""
    drain_deadline_ms: int

    def _init_lifecycle(self) -> None:
        self.state: RoleState = "idle"
        self._cond = threading.Condition()
        self._accepting = False
        self._accepted = False
        self._wake = threading.Event()
        self._loop_thread: threading.Thread | None = None
        self._drain_requested = threading.Event()
        self._signalled: str | None = None  # noted by the signal handler, acted on by run()
        self._stopped = threading.Event()
        self._close_deadline: float | None = None
        self._closing = False
        self._finished = False

    # -- the hooks a role fills in -------------------------------------------------------------

    def _ident(self) -> dict[str, Any]:
        """The log fields that name this role (``worker_id=…``)."""
        return {}

    def _begin(self) -> None:
        """``start()``'s own work, before the loop runs (register, subscribe, log ``started``); may refuse."""

    def _loop(self) -> None:
        """The loop body, on its own thread: pass, then wait on ``self._wake``, while ``self._accepting``."""

    def _on_accept(self, reason: str) -> dict[str, Any]:
        """The accept phase's own work (the worker aborts its jobs); answers extra log fields."""
        return {}

    def _busy(self) -> bool:
        """Whether work is in flight (called holding ``self._cond``)."""
        return False

    def _before_wait(self) -> None:
        """What close does before it waits (the worker hands back its buffered claims)."""

    def _abandoned(self) -> dict[str, Any]:
        """Log fields for ``drain-abandoned`` (called holding ``self._cond``)."""
        return {}

    def _teardown(self, finished: bool) -> None:
        """Release everything (``finished``: the work in flight ended inside the deadline)."""

    def _before_run(self) -> None:
        """What ``run()`` checks before it starts (the scheduler refuses a non-durable setup)."""

    # -- the lifecycle ---------------------------------------------------------------------------

    def start(self, *, loop: bool = True) -> None:
        """Begin: ``idle`` → ``running``, and the loop on its own thread (``loop=False`` leaves passes to
        ``run_once()``, as tests do). A role is started once; build a new one to start again."""
        with self._cond:
            if self.state != "idle":
                raise InvariantError(
                    f"{self.event_prefix.removeprefix('jobs.')} {self._ident()} is {self.state}; build a new one "
                    "to start again",
                    {"state": self.state},
                )
        self._begin()
        with self._cond:
            self._accepting = True
            self.state = "running"
        if loop:
            name = f"{self.event_prefix.replace('.', '-')}"
            self._loop_thread = threading.Thread(target=self._loop, name=name, daemon=True)
            self._loop_thread.start()

    def run(self, *, install_signals: bool = True) -> None:
        """Start, then block until a SIGTERM/SIGINT drain (or :meth:`stop`) has finished — for commands.
        ``install_signals=False`` leaves signals to a caller that drives its own teardown."""
        self._before_run()
        if install_signals:
            for signum in (os_signal.SIGTERM, os_signal.SIGINT):
                os_signal.signal(signum, self._on_signal)
        self.start()
        while not self._stopped.is_set():
            if self._signalled is not None and not self._drain_requested.is_set():
                self.accept(reason=self._signalled)
                self._drain_requested.set()
            if self._drain_requested.wait(timeout=SIGNAL_POLL_S):
                self.close(self.drain_deadline_ms)
        log_event(logging.INFO, f"{self.event_prefix}.stopped", **self._ident())

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signalled = os_signal.Signals(signum).name

    def accept(self, *, reason: str = "stop") -> None:
        """The drain's first phase: take no more work. Returns at once; work in flight carries on (the
        worker aborts its jobs' signals, so bodies that read them unwind)."""
        with self._cond:
            if self._accepted or self.state == "stopped":
                return
            self._accepted = True
            self._accepting = False
            self.state = "draining"
            busy = self._busy()
        self._wake.set()
        fields = self._on_accept(reason)
        log_event(logging.INFO, f"{self.event_prefix}.draining", signal=reason, busy=busy, **self._ident(), **fields)

    def close(self, deadline_ms: int | None) -> bool:
        """The drain's second phase: take no more work, wait for the work in flight up to ``deadline_ms``
        of wall-clock time (``None``: as long as it takes; a sooner bound from a later call shortens a
        wait already running), then release everything and reach ``stopped``. Answers whether the work
        finished — every caller the same answer."""
        with self._cond:
            if self.state == "stopped":
                return self._finished
            self._accepting = False
            self.state = "draining"
            if deadline_ms is not None:
                bound = time.monotonic() + max(0, deadline_ms) / 1000
                current = self._close_deadline
                self._close_deadline = bound if current is None else min(current, bound)
                self._cond.notify_all()
        self._wake.set()
        self._before_wait()
        with self._cond:
            while self._busy():
                until = self._close_deadline
                left = WAIT_POLL_S if until is None else until - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, WAIT_POLL_S))
            finished = not self._busy()
            first, self._closing = not self._closing, True
            abandoned = {} if finished or not first else self._abandoned()
        if not first:
            self._stopped.wait()  # another close is releasing everything; answer its verdict
            return self._finished
        if not finished:
            log_event(logging.ERROR, f"{self.event_prefix}.drain-abandoned", **self._ident(), **abandoned)
        try:
            self._teardown(finished)
        finally:
            with self._cond:
                self._finished = finished
                self.state = "stopped"
                self._cond.notify_all()
            self._stopped.set()
        return finished

    def drain(self, deadline_ms: int | None = None, *, reason: str = "drain") -> bool:
        """Both phases, as SIGTERM runs them: :meth:`accept`, then :meth:`close` within the drain deadline
        (or ``deadline_ms``)."""
        self.accept(reason=reason)
        return self.close(self.drain_deadline_ms if deadline_ms is None else deadline_ms)

    def stop(self, deadline_ms: int | None = None) -> bool:
        """Take no more work and wait — aborting nothing — for the work in flight, up to ``deadline_ms``
        (``None``: as long as it takes); then release everything. Answers whether the work finished."""
        return self.close(deadline_ms)

    def kick(self) -> None:
        """Ask for one pass now; a kick during a pass asks for one more behind it, never a second loop."""
        if not self._wake.is_set():  # set() takes the event's lock even when it is set already
            self._wake.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until the role reached ``stopped``; answers whether it did within ``timeout`` seconds."""
        return self._stopped.wait(timeout)

    def _join_loop(self, timeout: float = 5.0) -> None:
        thread = self._loop_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


class Role(Protocol):
    """What a role exposes to a shared lifecycle (the worker, the scheduler and the relay do)."""

    def start(self, *, loop: bool = True) -> None:
        """Begin the role's loop."""

    def accept(self, *, reason: str = "stop") -> None:
        """Stop taking new work; return at once."""

    def close(self, deadline_ms: int | None) -> bool:
        """Wait for work in flight up to ``deadline_ms``, then release everything; answers whether all finished."""


class Roles:
    """Run ``roles`` until a signal drains them.

    >>> Roles([worker_from_settings(), scheduler_from_settings()], drain_deadline_ms=25_000).run()
    """

    def __init__(self, roles: Sequence[Role], *, drain_deadline_ms: int) -> None:
        self.roles = list(roles)
        self.drain_deadline_ms = drain_deadline_ms
        self._drain = threading.Event()
        self._reason = "stop"
        self._signalled: str | None = None  # noted by the signal handler, acted on by run()

    def run(self, *, install_signals: bool = True) -> bool:
        """Start every role, block until SIGTERM/SIGINT (or :meth:`request_drain`), then drain them all.
        Answers whether every role finished its work inside the deadline."""
        if install_signals:
            for signum in (os_signal.SIGTERM, os_signal.SIGINT):
                os_signal.signal(signum, self._on_signal)
        for role in self.roles:
            role.start()
        while not self._drain.wait(timeout=SIGNAL_POLL_S):
            if self._signalled is not None:
                self.request_drain(self._signalled)
        return self.drain(self._reason)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signalled = os_signal.Signals(signum).name

    def request_drain(self, reason: str = "stop") -> None:
        """Ask :meth:`run` to drain (what a signal does)."""
        self._reason = reason
        self._drain.set()

    def drain(self, reason: str = "stop") -> bool:
        """Accept on every role, then close every role within what is left of one deadline."""
        for role in self.roles:
            role.accept(reason=reason)
        deadline = time.monotonic() + self.drain_deadline_ms / 1000
        finished = True
        for role in self.roles:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            finished = role.close(left_ms) and finished
        log_event(logging.INFO, "jobs.dev.stopped", roles=len(self.roles), finished=finished)
        return finished
