"""Cooperative cancellation: a :class:`CancelSignal` per run and per step.

Deadlines, an operator cancel, a lost lease and the SIGTERM drain abort a run's signal. Nothing can
kill a body that ignores it, so the durable state is fenced instead: after the abort every step
write is refused with ``X_ABORTED``.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import JobAbortedError, UltimateError
from ..guards.sync_only import refuse_async

logger = logging.getLogger("ultimate_jobs")


class CancelSignal:
    """An abort flag with a reason, callbacks, and an interruptible wait.

    >>> signal = CancelSignal()
    >>> signal.abort(JobAbortedError("operator cancel"))
    >>> signal.aborted, signal.reason.code
    (True, 'X_ABORTED')

    A child signal (``signal.child()``) aborts with its parent, and may also be aborted alone —
    that is how a step's own ceiling stops one step without touching the run.
    """

    def __init__(self) -> None:
        # Two signals per attempt: the Event a waiter sleeps on is made only when someone waits.
        self._lock = threading.Lock()
        self._aborted = False
        self._event: threading.Event | None = None
        self._reason: UltimateError | None = None
        self._callbacks: list[Callable[[UltimateError], None]] = []

    @property
    def aborted(self) -> bool:
        """True once :meth:`abort` ran."""
        return self._aborted

    @property
    def reason(self) -> UltimateError | None:
        """The error the abort carried; ``None`` while the signal is live."""
        return self._reason

    def abort(self, reason: UltimateError | None = None) -> bool:
        """Abort with ``reason`` (default ``X_ABORTED``). The first abort wins; answers whether this one did."""
        with self._lock:
            if self._aborted:
                return False
            self._reason = reason or JobAbortedError("the run was cancelled")
            callbacks, self._callbacks = self._callbacks, []
            self._aborted = True
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks:
            try:
                callback(self._reason)
            except Exception:
                logger.exception("jobs.signal.callback-failed")
        return True

    def throw_if_aborted(self) -> None:
        """Raise ``X_ABORTED`` (carrying the abort's reason) when the signal was aborted."""
        if self._reason is not None:
            raise JobAbortedError(
                f"the attempt was cancelled ({self._reason.code}); stop and return",
                {"reason": self._reason.code},
            )

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on abort. Answers :attr:`aborted`."""
        with self._lock:
            if self._aborted:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def add_callback(self, fn: Callable[[UltimateError], None]) -> None:
        """Call ``fn(reason)`` on abort — at once when already aborted."""
        refuse_async(fn, what="CancelSignal.add_callback(fn): fn")
        with self._lock:
            if not self._aborted:
                self._callbacks.append(fn)
                return
        assert self._reason is not None
        fn(self._reason)

    def child(self) -> CancelSignal:
        """A signal that aborts when this one does (with the same reason), and can abort alone."""
        child = CancelSignal()

        def forward(reason: UltimateError) -> None:
            child.abort(reason)

        self.add_callback(forward)
        return child


_current: contextvars.ContextVar[CancelSignal | None] = contextvars.ContextVar("ultimate_jobs_signal", default=None)


def current_signal() -> CancelSignal | None:
    """The innermost signal in scope: a step's inside ``step.run``, the run's inside a body."""
    return _current.get()


@contextmanager
def signal_scope(signal: CancelSignal) -> Iterator[CancelSignal]:
    """Install ``signal`` as :func:`current_signal` for the duration of the block."""
    token = _current.set(signal)
    try:
        yield signal
    finally:
        _current.reset(token)
