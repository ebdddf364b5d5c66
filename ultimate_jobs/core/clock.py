"""Every time read in the library goes through a :class:`Clock`, so tests freeze and advance time.

A clock also schedules: ``call_at(ms, fn)`` runs ``fn`` once at a clock instant and
``every(ms, fn)`` renews leases and registry rows. The system clock runs them on one timer
thread; :class:`ultimate_jobs.testing.FrozenClock` runs them when a test advances it.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

MIN_INSTANT_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
MAX_INSTANT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
"""The instants every driver and Python's ``datetime`` can hold, in epoch ms: years 1 to 9999."""

logger = logging.getLogger("ultimate_jobs")


class Timer(Protocol):
    """A handle on a scheduled callback."""

    def cancel(self) -> None:
        """Stop it from firing (again). Idempotent."""


class Clock(Protocol):
    """Milliseconds since the epoch, and a scheduler driven by the same time."""

    def now_ms(self) -> int:
        """The current instant in epoch milliseconds."""

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` once when the clock reaches ``at_ms``."""

    def every(self, interval_ms: int, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` every ``interval_ms`` until cancelled."""

    def sleep(self, ms: int) -> None:
        """Block the calling thread for ``ms`` of this clock's time."""


class _Entry:
    __slots__ = ("at", "cancelled", "fn", "interval", "seq")

    def __init__(self, at: int, seq: int, fn: Callable[[], None], interval: int | None) -> None:
        self.at, self.seq, self.fn, self.interval, self.cancelled = at, seq, fn, interval, False

    def __lt__(self, other: _Entry) -> bool:
        return (self.at, self.seq) < (other.at, other.seq)

    def cancel(self) -> None:
        self.cancelled = True


class TimerHeap:
    """The shared scheduling core of both clocks: a heap of due callbacks, popped in time order."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def push(self, at_ms: int, fn: Callable[[], None], interval: int | None = None) -> _Entry:
        if interval is not None and interval <= 0:
            raise ValueError("every(): the interval must be a positive number of milliseconds")
        entry = _Entry(at_ms, next(self._seq), fn, interval)
        with self._lock:
            heapq.heappush(self._heap, entry)
        return entry

    def next_at(self) -> int | None:
        with self._lock:
            while self._heap and self._heap[0].cancelled:
                heapq.heappop(self._heap)
            return self._heap[0].at if self._heap else None

    def pop_due(self, now_ms: int) -> _Entry | None:
        """Pop one due entry, re-arming it first when it repeats."""
        with self._lock:
            while self._heap:
                head = self._heap[0]
                if head.cancelled:
                    heapq.heappop(self._heap)
                    continue
                if head.at > now_ms:
                    return None
                heapq.heappop(self._heap)
                if head.interval is not None:
                    head.at += head.interval
                    head.seq = next(self._seq)
                    heapq.heappush(self._heap, head)
                return head
            return None

    @staticmethod
    def fire(entry: _Entry) -> None:
        try:
            entry.fn()
        except Exception:  # a timer callback must never kill the thread that runs every other one
            logger.exception("jobs.timer.failed")


class SystemClock:
    """Wall time, with one daemon thread running every scheduled callback."""

    def __init__(self) -> None:
        self._timers = TimerHeap()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, ms: int) -> None:
        if ms > 0:
            time.sleep(ms / 1000)

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> Timer:
        entry = self._timers.push(at_ms, fn)
        self._kick()
        return entry

    def every(self, interval_ms: int, fn: Callable[[], None]) -> Timer:
        entry = self._timers.push(self.now_ms() + interval_ms, fn, interval_ms)
        self._kick()
        return entry

    def _kick(self) -> None:
        with self._wake:
            if self._thread is None or not self._thread.is_alive():
                # a fresh context: the thread may be started inside a run, and outlives it (no scope of any run)
                fresh = contextvars.Context()
                self._thread = threading.Thread(
                    target=fresh.run, args=(self._loop,), name="ultimate-jobs-timers", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def _loop(self) -> None:
        while True:
            entry = self._timers.pop_due(self.now_ms())
            if entry is not None:
                self._timers.fire(entry)
                continue
            with self._wake:  # read the next instant under the lock _kick notifies under: no lost wake-up
                at = self._timers.next_at()
                wait = 60.0 if at is None else max(0.0, (at - self.now_ms()) / 1000)
                self._wake.wait(timeout=wait)


_system_clock = SystemClock()


def system_clock() -> SystemClock:
    """The process-wide wall clock (one timer thread for the whole process)."""
    return _system_clock
