"""The worker's heartbeat and its registry row: every in-flight lease renewed in one batched call per
``heartbeat_interval`` on one long-lived thread with its own database connection (a test clock beats on
the caller's thread), and the ``x_workers`` row written when no claim pass carried it."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..contracts.operator import WorkerInfo
from ..contracts.protocol import JobDriver
from ..core.clock import Clock
from ..core.logs import log_event
from ..runtime.dbconn import close_thread_connections, release_stale_connections
from .inflight import InFlight, lease_lost, renew_round

if TYPE_CHECKING:
    from .runtime import JobWorker


class LeaseRenewal:
    """The heartbeat half of :class:`~ultimate_jobs.worker.runtime.JobWorker` (a mixin: the worker owns
    the attributes it reads)."""

    worker_id: str
    host: str
    driver: JobDriver
    clock: Clock
    queues: tuple[str, ...]
    slots: dict[str, int]
    async_slots: dict[str, int]
    heartbeat_interval_ms: int
    _started_ms: int
    _recorded_ms: int
    _beat_thread: threading.Thread | None
    _beat_running: threading.Lock
    _beat_due: threading.Event
    _beat_stop: threading.Event
    in_flight: Callable[[], list[InFlight]]

    def _heartbeat(self) -> None:
        if self._beat_thread is None:  # a test clock: beat on the caller's thread
            self._beat()
            return
        if self._beat_running.locked():
            renew_round_check_windows(self)  # type: ignore[arg-type]  # the last beat still hangs
            return
        self._beat_due.set()

    def _beat(self) -> None:
        with self._beat_running:
            renew_round(self)  # type: ignore[arg-type]
            # the claim loop carries the registry row every heartbeat interval; write it here only when
            # the loop has not (every slot busy: no claim runs)
            self._record_worker(unless_within_ms=self.heartbeat_interval_ms * 3 // 2)

    def _beat_loop(self) -> None:
        """The heartbeat's own long-lived thread (with one database connection): beats when due."""
        try:
            while True:
                self._beat_due.wait()
                self._beat_due.clear()
                if self._beat_stop.is_set():
                    return
                try:
                    self._beat()
                except Exception as exc:
                    log_event(logging.ERROR, "jobs.heartbeat.failed", worker_id=self.worker_id, error=repr(exc))
                release_stale_connections()
        finally:
            close_thread_connections()

    def _worker_info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.worker_id,
            host=self.host,
            pid=os.getpid(),
            started_at_ms=self._started_ms,
            queues=self.queues,
            slots=sum(self.slots.values()) + sum(self.async_slots.values()),  # threads plus async runs
            in_flight=tuple(f.job.id for f in self.in_flight()),
            heartbeat_at_ms=self.clock.now_ms(),
        )

    def _registry_row_due(self, *, after_ms: int) -> WorkerInfo | None:
        """This worker's registry row when the last one written is ``after_ms`` old, else ``None``."""
        if self.clock.now_ms() - self._recorded_ms < after_ms:
            return None
        return self._worker_info()

    def _record_worker(self, *, unless_within_ms: int = 0) -> None:
        """Write the registry row — unless the claim loop carried one within ``unless_within_ms``."""
        info = self._registry_row_due(after_ms=unless_within_ms)
        if info is None:
            return
        try:
            self.driver.record_worker(info)
            self._recorded_ms = info.heartbeat_at_ms
        except Exception as exc:
            log_event(logging.WARNING, "jobs.worker.registry-failed", worker_id=self.worker_id, error=repr(exc))


def renew_round_check_windows(worker: JobWorker) -> None:
    """While a heartbeat hangs, still catch leases whose whole window passed with nothing landing."""
    now = worker.clock.now_ms()
    for flight in worker.in_flight():
        if not flight.settling and not flight.lost and now - flight.last_renewed_ms >= worker.visibility_timeout_ms:
            lease_lost(worker, flight, "the heartbeat hung for a whole window")
