"""The settle buffer: completed attempts are acked in batches by one flusher thread, so a slot never
waits for its own ``SQL_ACK``.

A slot whose body returned hands its completion to :meth:`SettleBuffer.ack_later` and takes its next
job at once; the flusher settles everything pending with ONE ``driver.ack_many`` (each row still fenced on its own
claim) and then tells each caller whether its row landed. Batches form by themselves: while one flush
is on the wire, the completions that arrive meanwhile wait for the next — the shape of Postgres's
group commit, with no added delay when the queue is quiet. :meth:`SettleBuffer.ack` is the same, but
waits for the answer (a job whose ``on_settled`` must hear a landed settle before the slot moves on).

A flush that raises tells every caller in the batch (their leases lapse and the queue delivers the
rows again, as at-least-once promises); :meth:`SettleBuffer.close` flushes what is pending before the
worker exits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..contracts.jobs import Ack, ClaimRef
from ..contracts.protocol import JobDriver
from ..core.logs import log_event
from ..runtime.dbconn import close_thread_connections, release_stale_connections

MAX_ACK_BATCH = 500
CLOSE_TIMEOUT_S = 10.0

# What a caller of ack_later hears once its row's flush has come back: whether it landed, or the error.
SettleCallback = Callable[[bool, BaseException | None], None]


@dataclass(slots=True)
class _Pending:
    ack: Ack
    then: SettleCallback


class SettleBuffer:
    """``ack()`` / ``ack_later()`` with the executor's signature, flushed in batches through
    ``driver.ack_many`` on one long-lived thread (with one database connection)."""

    def __init__(self, driver: JobDriver, *, max_batch: int = MAX_ACK_BATCH, name: str = "jobs-settle") -> None:
        self._driver = driver
        self._max = max_batch
        self._name = name
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._in_flush = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    def ack_later(self, ack: Ack, *, then: SettleCallback) -> None:
        """Queue one row to settle ``done``; ``then(landed, error)`` runs on the flusher once it flushed."""
        item = _Pending(ack, then)
        with self._cond:
            if self._closed:
                closed = True
            else:
                closed = False
                self._pending.append(item)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                    self._thread.start()
                if len(self._pending) == 1:  # the flusher waits only on an empty buffer: wake it once, not per row
                    self._cond.notify_all()
        if closed:  # after close(): settle on the caller's thread rather than lose the ack
            self._settle([item])

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None, wait_ms: int | None = None) -> bool:
        """Settle one row ``done`` and wait: answers whether it landed (raises what its flush raised)."""
        done = threading.Event()
        answer: list[tuple[bool, BaseException | None]] = []

        def then(landed: bool, error: BaseException | None) -> None:
            answer.append((landed, error))
            done.set()

        self.ack_later(Ack(job_id, ref, duration_ms or 0, wait_ms), then=then)
        done.wait()
        landed, error = answer[0]
        if error is not None:
            raise error
        return landed

    def pending(self) -> int:
        """Rows queued or on the wire right now."""
        with self._cond:
            return len(self._pending) + self._in_flush

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Flush what is pending, stop the flusher; answers whether everything was flushed in time. A
        late ``ack_later`` settles on its caller's thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _serve(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._closed:
                        self._cond.wait()
                    if not self._pending:
                        return  # closed and flushed
                    batch, self._pending = self._pending[: self._max], self._pending[self._max :]
                    self._in_flush = len(batch)
                self._settle(batch)
                with self._cond:
                    self._in_flush = 0
                    self._cond.notify_all()
        finally:
            close_thread_connections()  # the flusher's one database connection goes with it

    def _settle(self, batch: list[_Pending]) -> None:
        try:
            landed = self._driver.ack_many([p.ack for p in batch])
        except Exception as exc:  # every caller in the batch hears the fault; their leases lapse
            release_stale_connections()
            for p in batch:
                self._tell(p, False, exc)
            return
        for p in batch:
            self._tell(p, p.ack.job_id in landed, None)

    def _tell(self, item: _Pending, landed: bool, error: BaseException | None) -> None:
        try:
            item.then(landed, error)
        except Exception as exc:  # a callback must never stop the flusher
            log_event(logging.ERROR, "jobs.settle.callback-failed", job_id=item.ack.job_id, error=repr(exc))
