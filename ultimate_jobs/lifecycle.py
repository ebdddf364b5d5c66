"""Several roles in one process (``jobs_dev``): start them together, drain them together.

SIGTERM/SIGINT run every role's accept phase first — each stops taking work (the worker also
aborts its jobs' signals with ``X_DRAINING``) — and then every close phase, all bounded by ONE
drain deadline, so a role queued behind another's wait never starts its own accept late.
"""

from __future__ import annotations

import logging
import signal as os_signal
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from .logs import log_event

DEFAULT_DRAIN_DEADLINE_MS = 25_000
"""How long a role's close phase waits for work in flight when nothing else is said (the default of
``ULTIMATE_JOBS['DRAIN_DEADLINE']``): the worker, the scheduler and the relay share it."""


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

    def run(self, *, install_signals: bool = True) -> bool:
        """Start every role, block until SIGTERM/SIGINT (or :meth:`request_drain`), then drain them all.
        Answers whether every role finished its work inside the deadline."""
        if install_signals:
            for signum in (os_signal.SIGTERM, os_signal.SIGINT):
                os_signal.signal(signum, self._on_signal)
        for role in self.roles:
            role.start()
        while not self._drain.wait(timeout=0.5):
            pass
        return self.drain(self._reason)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.request_drain(os_signal.Signals(signum).name)

    def request_drain(self, reason: str = "stop") -> None:
        """Ask :meth:`run` to drain (what the signal handler does)."""
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
