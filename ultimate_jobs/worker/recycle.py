"""A supervised worker process's watch: past ``--max-jobs`` or ``--max-memory`` — or once its supervisor
is gone — it drains the worker the way SIGTERM does and the process exits for the supervisor to replace.

The watch reads only the worker's public surface: ``worker.stats``, ``worker.state`` and ``accept()``.
It runs the accept phase itself (logged with ``signal="recycle"``), then sends this process SIGTERM so
``JobWorker.run()`` runs the close phase on the main thread, exactly as it does for an operator's
SIGTERM. A recycled process exits with :data:`EXIT_RECYCLED` (75); the supervisor starts its
replacement at once.
"""

from __future__ import annotations

import logging
import os
import re
import signal as os_signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.logs import log_event
from ..errors import InvariantError
from .runtime import JobWorker, WorkerStats

EXIT_RECYCLED = 75
"""A worker process's exit code after a recycle drain (``EX_TEMPFAIL``: done for now, start another)."""

WATCH_INTERVAL_S = 0.25

_SIZE = re.compile(r"^\s*([0-9]{1,15})\s*(?:([KMG])(?:I?B)?|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(value: str, *, field: str) -> int:
    """Bytes for ``'512MB'``, ``'512M'``, ``'512MiB'``, ``'2GB'``, ``'800KB'`` or a bare byte count — K, M
    and G are powers of 1024, as ``ps`` and ``/proc`` count memory.

    >>> parse_size("512MB", field="--max-memory")
    536870912
    """
    match = _SIZE.match(value)
    if match is None or int(match.group(1)) < 1:
        raise InvariantError(
            f"{field} {value!r} is not a memory size; write e.g. 512MB or 2GB (K, M, G count in 1024s)",
            {"field": field, "value": value},
        )
    unit = match.group(2).upper() if match.group(2) else None
    return int(match.group(1)) * _SIZE_UNITS[unit]


def parse_count(value: str | int, *, field: str, what: str) -> int:
    """A whole number ≥ 1 from a command-line value, else ``X_INVARIANT`` saying what to write."""
    text = str(value).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 15) or int(text) < 1:
        raise InvariantError(f"{field} {value!r}: {what}; write a whole number of 1 or more", {"field": field})
    return int(text)


@dataclass(frozen=True, slots=True)
class RecycleLimits:
    """When a supervised worker process drains and exits for a fresh one: after ``max_jobs`` finished
    attempts, or once its resident memory passes ``max_memory_bytes`` (``None``: no such limit)."""

    max_jobs: int | None = None
    max_memory_bytes: int | None = None

    @classmethod
    def from_options(cls, *, max_jobs: str | int | None, max_memory: str | None) -> RecycleLimits:
        """Validate ``--max-jobs N`` and ``--max-memory 512MB``."""
        return cls(
            max_jobs=None if max_jobs is None else parse_count(max_jobs, field="--max-jobs", what="jobs per process"),
            max_memory_bytes=None if max_memory is None else parse_size(max_memory, field="--max-memory"),
        )

    @property
    def any(self) -> bool:
        return self.max_jobs is not None or self.max_memory_bytes is not None


def jobs_run(stats: WorkerStats) -> int:
    """The attempts a worker has run to an outcome (shed claims and drain interruptions excluded)."""
    return stats.completed + stats.retried + stats.dead + stats.dropped + stats.suspended + stats.refused


def resident_bytes() -> int | None:
    """This process's resident set now (``VmRSS`` in ``/proc/self/status``); where there is no ``/proc``,
    its peak resident set (``getrusage``); ``None`` when neither answers."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _sigterm_self() -> None:
    os.kill(os.getpid(), os_signal.SIGTERM)


class RecycleWatch:
    """Every ``interval_s``: past a limit, or orphaned (the parent is no longer ``supervisor_pid``),
    run ``worker.accept()`` and ``request_close()`` (default: SIGTERM to this process, whose handler
    ``JobWorker.run()`` installed). Acts once, and only while the worker is ``running``.

    >>> watch = RecycleWatch(worker, RecycleLimits(max_jobs=1000), supervisor_pid=os.getppid())
    >>> watch.start(); worker.run(); watch.stop()
    """

    def __init__(
        self,
        worker: JobWorker,
        limits: RecycleLimits,
        *,
        supervisor_pid: int | None,
        request_close: Callable[[], None] = _sigterm_self,
        rss: Callable[[], int | None] = resident_bytes,
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self.worker = worker
        self.limits = limits
        self.supervisor_pid = supervisor_pid
        self.reason: str | None = None
        self._request_close = request_close
        self._rss = rss
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="jobs-recycle-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            if self.run_once() is not None:
                return

    def run_once(self) -> str | None:
        """One look: answers the reason it drained the worker for (``max-jobs``, ``max-memory``,
        ``orphaned``), or ``None``."""
        if self.reason is not None or self.worker.state != "running":
            return None
        reason, facts = self._due()
        if reason is None:
            return None
        self.reason = reason
        log_event(logging.INFO, "jobs.worker.recycling", worker_id=self.worker.worker_id, reason=reason, **facts)
        self.worker.accept(reason="orphaned" if reason == "orphaned" else "recycle")
        self._request_close()
        return reason

    def _due(self) -> tuple[str | None, dict[str, Any]]:
        if self.supervisor_pid is not None and os.getppid() != self.supervisor_pid:
            return "orphaned", {"supervisor_pid": self.supervisor_pid}
        done = jobs_run(self.worker.stats)
        if self.limits.max_jobs is not None and done >= self.limits.max_jobs:
            return "max-jobs", {"jobs": done, "max_jobs": self.limits.max_jobs}
        # a fresh process already over the limit would recycle in a loop: judge memory after a job ran
        if self.limits.max_memory_bytes is not None and done:
            rss = self._rss()
            if rss is not None and rss >= self.limits.max_memory_bytes:
                return "max-memory", {"jobs": done, "rss_bytes": rss, "max_memory_bytes": self.limits.max_memory_bytes}
        return None, {}

    @property
    def recycled(self) -> bool:
        """Whether the watch drained the worker for a limit (not for a lost supervisor)."""
        return self.reason in ("max-jobs", "max-memory")


def run_supervised(worker: JobWorker, limits: RecycleLimits, *, supervisor_pid: int | None) -> int:
    """Run ``worker`` under a :class:`RecycleWatch` until it is drained; answers the process's exit code:
    :data:`EXIT_RECYCLED` after a recycle, else 0."""
    watch = RecycleWatch(worker, limits, supervisor_pid=supervisor_pid)
    watch.start()
    try:
        worker.run()
    finally:
        watch.stop()
    return EXIT_RECYCLED if watch.recycled else 0
