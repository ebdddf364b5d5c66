"""The event loop's watchdog: a body that blocks the loop — ``time.sleep(5)``, a sync HTTP call, a long
CPU loop inside ``async def`` — stalls every async job of the process, so it is found and named.

A daemon thread pings the loop (``call_soon_threadsafe``) every :data:`PING_INTERVAL_MS`. A ping the loop
has not answered within the stall bound (:data:`LOOP_STALL_MS`, 1 s) means a callback is holding it: the
watchdog reads the loop thread's stack (``sys._current_frames()``), finds the frame of the async job body
running there, and logs ``jobs.worker.loop-blocked`` (a warning) with the job's name, id and attempt and
where the body is (``file:line in function``); once the loop answers again, ``jobs.worker.loop-unblocked``
with how long it was held. The heartbeat runs on its own thread, so a blocked loop does not stop leases
from being renewed — but every other async job waits, so the fix is to await (``asyncio.sleep``,
``httpx.AsyncClient``) or to move the blocking call off the loop (``asgiref.sync.sync_to_async``).

Lifecycle: :meth:`LoopWatchdog.start`, :meth:`LoopWatchdog.stop`, and :meth:`LoopWatchdog.check_once`
(one ping; tests drive it).
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
import time
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

from ..core import registry
from ..core.definition import JobHandle
from ..core.logs import log_event
from ..core.run import JobRun

if TYPE_CHECKING:
    from ..runtime.async_lane import AsyncLane
    from .runtime import JobWorker

LOOP_STALL_MS = 1_000
"""How long the loop may leave a ping unanswered before the watchdog reports it blocked."""
PING_INTERVAL_MS = 250
"""How often the watchdog pings the loop while it answers."""
MAX_FRAMES = 200
"""How deep the watchdog walks the loop thread's stack looking for a job body."""


class LoopWatchdog:
    """Watch ``lane``'s loop for callbacks that hold it past ``stall_ms``; name the job of ``worker``
    whose body holds it.

    >>> LoopWatchdog(lane, worker=worker, stall_ms=1_000).start()
    """

    def __init__(self, lane: AsyncLane, *, worker: JobWorker, stall_ms: int = LOOP_STALL_MS) -> None:
        self._lane = lane
        self._worker = worker
        self.stall_ms = stall_ms
        self.stalls = 0
        """How many stalls were reported."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bodies: dict[CodeType, str] = {}

    def start(self) -> None:
        """Learn the async job bodies' code, then watch on a daemon thread."""
        for handle in registry.registered("job"):
            if isinstance(handle, JobHandle) and handle.is_async:
                code = getattr(inspect.unwrap(handle.fn), "__code__", None)
                if isinstance(code, CodeType):
                    self._bodies[code] = handle.name
        self._thread = threading.Thread(target=self._serve, name="jobs-loop-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (before the loop stops); joins the thread."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.check_once():
                return
            self._stop.wait(PING_INTERVAL_MS / 1000)

    def check_once(self) -> bool:
        """One ping: wait up to the stall bound for the loop to answer; when it does not, report the job
        holding it and wait (while not stopped) until it answers. Answers False once the loop is gone."""
        answered = threading.Event()
        sent = time.monotonic()
        try:
            self._lane.loop.call_soon_threadsafe(answered.set)
        except RuntimeError:  # the loop is closed: nothing left to watch
            return False
        if answered.wait(self.stall_ms / 1000):
            return True
        self.stalls += 1
        fields = self._holder()
        log_event(
            logging.WARNING,
            "jobs.worker.loop-blocked",
            worker_id=self._worker.worker_id,
            blocked_ms=int((time.monotonic() - sent) * 1000),
            fix="await instead of blocking (asyncio.sleep, an async client), or run the blocking call in "
            "asgiref.sync.sync_to_async",
            **fields,
        )
        while not answered.wait(PING_INTERVAL_MS / 1000):
            if self._stop.is_set():
                return False
        log_event(
            logging.INFO,
            "jobs.worker.loop-unblocked",
            worker_id=self._worker.worker_id,
            blocked_ms=int((time.monotonic() - sent) * 1000),
            **fields,
        )
        return True

    def _holder(self) -> dict[str, Any]:
        """Who holds the loop: the innermost async job body on the loop thread's stack — its name (by its
        code), its id and attempt (by its ``run`` argument, or the only run of that name in flight) — and
        the innermost frame's place. Empty fields when no job body is on the stack (library code)."""
        thread = self._lane.thread
        frame = sys._current_frames().get(thread.ident) if thread is not None and thread.ident else None
        if frame is None:
            return {"name": None, "job_id": None}
        where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        found = _find_body(frame, self._bodies)
        if found is None:
            return {"name": None, "job_id": None, "where": where}
        name, body = found
        run = _run_argument(body)
        if run is not None:
            return {"name": name, "job_id": run.job_id, "attempt": run.attempt, "where": where}
        ids = [f.job.id for f in self._worker.in_flight() if f.job.name == name]
        return {"name": name, "job_id": ids[0] if len(ids) == 1 else None, "where": where}


def _find_body(frame: FrameType, bodies: dict[CodeType, str]) -> tuple[str, FrameType] | None:
    """The innermost frame on the stack whose code is a registered async body, with that job's name."""
    current: FrameType | None = frame
    for _ in range(MAX_FRAMES):
        if current is None:
            return None
        name = bodies.get(current.f_code)
        if name is not None:
            return name, current
        current = current.f_back
    return None


def _run_argument(body: FrameType) -> JobRun[Any] | None:
    """The body's first argument when it is the run (read while the loop thread is held)."""
    code = body.f_code
    if code.co_argcount < 1:
        return None
    value = body.f_locals.get(code.co_varnames[0])
    return value if isinstance(value, JobRun) else None
