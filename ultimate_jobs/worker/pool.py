"""One queue's slots: a fixed pool of DAEMON threads that run attempts.

Not ``concurrent.futures.ThreadPoolExecutor``: the interpreter joins its threads at exit, so a body
that ignores its signal past the drain deadline would keep the process alive forever — the drain
deadline bounds the worker's exit only if an abandoned body cannot hold the process open. The
abandoned row's lease lapses and the queue delivers it again, as at-least-once promises.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from ..core.logs import log_event
from ..runtime.dbconn import close_thread_connections
from .turns import TurnQueue

T = TypeVar("T")

TURN = object()  # a wake-up: the thread that takes it takes the next item (first, or in lane turn)


class SlotPool(Generic[T]):
    """Run ``run(item)`` for each submitted item on at most ``size`` daemon threads, started as work
    arrives. Items beyond the free threads wait in order (the worker's claim-ahead buffer) — with ``lane``,
    in turn across lanes (a :class:`~.turns.TurnQueue`); an item given to :meth:`submit_first` goes ahead of
    them all. The threads wake on one token per item and take the next item; :meth:`take_queued` takes back
    the ones no thread has started."""

    def __init__(
        self, size: int, *, name: str, run: Callable[[T], None], lane: Callable[[T], str] | None = None
    ) -> None:
        if size < 1:
            raise ValueError("a slot pool needs at least one thread")
        self._size = size
        self._name = name
        self._run = run
        self._work: queue.SimpleQueue[object | None] = queue.SimpleQueue()  # one TURN per item; None: stop
        self._waiting: deque[T] | TurnQueue[T] = deque() if lane is None else TurnQueue(lane)
        self._first: deque[T] = deque()  # items that go ahead of the waiting ones (submit_first)
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads blocked waiting for an item
        self._queued = 0  # items submitted that no thread has taken yet
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, item: T) -> None:
        """Queue ``item``; a thread is started for it when every started thread is busy and the pool is
        not full."""
        self._put(item, first=False)

    def submit_first(self, item: T) -> None:
        """Queue ``item`` ahead of every item waiting (a run that comes back to its slot at a set time)."""
        self._put(item, first=True)

    def _put(self, item: T, *, first: bool) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"slot pool {self._name} is shut down")
            (self._first if first else self._waiting).append(item)
            self._work.put(TURN)
            self._queued += 1
            if self._queued > self._idle and len(self._threads) < self._size:
                thread = threading.Thread(target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()

    def take_queued(self) -> list[T]:
        """Take back every queued item no thread has started (a drain hands them back unrun)."""
        with self._lock:  # a thread woken but not yet served finds none, and waits again
            taken = [*self._first, *self._waiting]
            self._first.clear()
            self._waiting.clear()
            self._queued -= len(taken)
        return taken

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            token = self._work.get()
            with self._lock:
                self._idle -= 1
                if token is None:
                    item = None
                elif self._first:
                    item = self._first.popleft()
                elif self._waiting:
                    item = self._waiting.popleft()
                else:
                    continue  # its item was taken back (a drain's hand-back)
                if item is not None:
                    self._queued -= 1
            if item is None:
                close_thread_connections()  # the slot thread's one database connection goes with it
                return
            try:
                self._run(item)
            except BaseException as exc:  # the worker's own _execute catches; this is the last line: the slot lives
                log_event(logging.ERROR, "jobs.worker.slot-failed", pool=self._name, error=repr(exc))

    def shutdown(self, *, wait: bool) -> None:
        """Refuse new work; let queued work run, then stop each thread. ``wait`` joins them."""
        with self._lock:
            if self._closed:
                threads: list[threading.Thread] = []
            else:
                self._closed = True
                threads = list(self._threads)
                for _ in threads:
                    self._work.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()
