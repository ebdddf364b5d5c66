"""Cooperative cancellation: a :class:`CancelSignal` per run and per step.

Deadlines, an operator cancel, a lost lease and the SIGTERM drain abort a run's signal. Nothing can
kill a body that ignores it, so the durable state is fenced instead: after the abort every step
write is refused with ``X_ABORTED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

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
        self.listen(fn)

    def listen(self, fn: Callable[[UltimateError], None]) -> None:
        """:meth:`add_callback` without the check that ``fn`` is no coroutine function: for the plain
        callbacks this package registers on every attempt."""
        with self._lock:
            if not self._aborted:
                self._callbacks.append(fn)
                return
        assert self._reason is not None
        fn(self._reason)

    def unlisten(self, fn: Callable[[UltimateError], None]) -> None:
        """Drop a callback :meth:`listen` registered (no-op once called or gone): an attempt that ended takes
        its callback back, so nothing of the attempt stays reachable from a signal that outlives it."""
        with self._lock:
            if fn in self._callbacks:
                self._callbacks.remove(fn)

    def child(self) -> CancelSignal:
        """A signal that aborts when this one does (with the same reason), and can abort alone."""
        child = CancelSignal()

        def forward(reason: UltimateError) -> None:
            child.abort(reason)

        self.listen(forward)
        return child


_current: contextvars.ContextVar[CancelSignal | None] = contextvars.ContextVar("ultimate_jobs_signal", default=None)


def current_signal() -> CancelSignal | None:
    """The innermost signal in scope: a step's inside ``step.run``, the run's inside a body."""
    return _current.get()


@contextmanager
def signal_scope(signal: CancelSignal) -> Iterator[CancelSignal]:
    """Install ``signal`` as :func:`current_signal` for the duration of the block."""
    token = enter_signal(signal)
    try:
        yield signal
    finally:
        leave_signal(token)


def enter_signal(signal: CancelSignal) -> contextvars.Token[CancelSignal | None]:
    """:func:`signal_scope`'s entry as a call (an async attempt's hot path): pass its answer to
    :func:`leave_signal`."""
    return _current.set(signal)


def leave_signal(token: contextvars.Token[CancelSignal | None]) -> None:
    """Undo :func:`enter_signal`."""
    _current.reset(token)


async def cancel_on_abort(
    signal: CancelSignal,
    task: asyncio.Future[Any],
    *,
    on_abort: Callable[[UltimateError], Awaitable[None]] | None = None,
) -> bool:
    """Wait for ``task`` (an async body, or an async step's function); when ``signal`` aborts first — from
    any thread: a deadline's timer, the worker's drain — await ``on_abort(reason)``, cancel the task
    (``CancelledError`` at its next ``await``) and wait for it to unwind. Answers whether the abort
    cancelled it. Cancelling the waiter cancels the task too; the task's own outcome is left on it.

    >>> body = asyncio.ensure_future(fn(run))
    >>> if await cancel_on_abort(run.signal, body): ...   # settle by the signal's verdict
    """
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()  # the task ended, or the signal aborted

    def resolve(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    def wake(reason: UltimateError) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(resolve)

    task.add_done_callback(resolve)
    signal.listen(wake)
    try:
        await woken
        if task.done():
            return False
        if on_abort is not None and signal.reason is not None:
            await on_abort(signal.reason)
        task.cancel()
        await asyncio.wait({task})
        return True
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        task.remove_done_callback(resolve)
        signal.unlisten(wake)
