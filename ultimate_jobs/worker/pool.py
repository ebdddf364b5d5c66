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
from collections.abc import Callable

from ..logs import log_event
from .connections import close_thread_connections

_Work = Callable[[], None]


class SlotPool:
    """Run submitted callables on at most ``size`` daemon threads, started as work arrives."""

    def __init__(self, size: int, *, name: str) -> None:
        if size < 1:
            raise ValueError("a slot pool needs at least one thread")
        self._size = size
        self._name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: _Work) -> None:
        """Queue ``fn``; a thread is started for it unless one is idle or the pool is full."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"slot pool {self._name} is shut down")
            self._work.put(fn)
            if self._idle > 0:
                self._idle -= 1
                return
            if len(self._threads) < self._size:
                thread = threading.Thread(target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()

    def _serve(self) -> None:
        while True:
            fn = self._work.get()
            if fn is None:
                close_thread_connections()  # the slot thread's one database connection goes with it
                return
            try:
                fn()
            except Exception as exc:  # the worker's own _execute catches; this is the last line
                log_event(logging.ERROR, "jobs.worker.slot-failed", pool=self._name, error=repr(exc))
            with self._lock:
                self._idle += 1

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
