"""A frozen clock: time moves only when a test says so, and timers fire as it passes them."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.clock import Timer, TimerHeap

DEFAULT_EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class FrozenClock:
    """Implements :class:`~ultimate_jobs.core.clock.Clock`; ``advance()`` fires every timer it passes, in order.

    >>> clock = FrozenClock()
    >>> clock.call_at(clock.now_ms() + 1000, lambda: print("fired"))
    >>> clock.advance(1000)
    fired
    """

    def __init__(self, start_ms: int = DEFAULT_EPOCH_MS) -> None:
        self._now = start_ms
        self._timers = TimerHeap()
        self._lock = threading.RLock()

    def now_ms(self) -> int:
        return self._now

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> Timer:
        return self._timers.push(at_ms, fn)

    def every(self, interval_ms: int, fn: Callable[[], None]) -> Timer:
        return self._timers.push(self._now + interval_ms, fn, interval_ms)

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms``, firing each due timer at its own instant. Answers the new now."""
        if ms < 0:
            raise ValueError("a frozen clock never goes backwards")
        with self._lock:
            target = self._now + ms
            while True:
                at = self._timers.next_at()
                if at is None or at > target:
                    break
                self._now = max(self._now, at)
                entry = self._timers.pop_due(self._now)
                if entry is not None:
                    self._timers.fire(entry)
            self._now = target
            return self._now

    def set(self, at_ms: int) -> int:
        """Jump to ``at_ms`` (forward only), firing what it passes."""
        return self.advance(max(0, at_ms - self._now))

    def sleep(self, ms: int) -> None:
        """A sleep on a frozen clock is an advance."""
        if ms > 0:
            self.advance(ms)

    def next_timer_at(self) -> int | None:
        """When the next scheduled callback fires (``None`` when none is armed)."""
        return self._timers.next_at()
