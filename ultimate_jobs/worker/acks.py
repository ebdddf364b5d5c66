"""Batched acks: slot threads that finish together settle in ONE statement.

The first thread to ack while no flush is running becomes the flusher: it settles every ack
pending at that moment with ``driver.ack_many`` and keeps flushing whatever arrived meanwhile;
every other thread waits for its own answer. Alone, an ack is flushed at once (no added latency);
under load, acks group behind the flush in flight — the same shape as Postgres's group commit.
Each row is still fenced on its own claim, and each caller learns whether its row landed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..drivers.base import Ack, ClaimRef, JobDriver

MAX_ACK_BATCH = 500


@dataclass(slots=True)
class _Pending:
    ack: Ack
    done: threading.Event = field(default_factory=threading.Event)
    landed: bool = False
    error: BaseException | None = None


class AckBatcher:
    """``ack()`` with the executor's signature, flushed in batches through ``driver.ack_many``."""

    def __init__(self, driver: JobDriver, *, max_batch: int = MAX_ACK_BATCH) -> None:
        self._driver = driver
        self._max = max_batch
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._flushing = False

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None) -> bool:
        """Settle one row ``done``; answers whether it landed (raises what the batch's statement raised)."""
        item = _Pending(Ack(job_id, ref, duration_ms or 0))
        with self._lock:
            self._pending.append(item)
            lead = not self._flushing
            if lead:
                self._flushing = True
        if lead:
            self._flush()
        item.done.wait()
        if item.error is not None:
            raise item.error
        return item.landed

    def _flush(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending[: self._max], self._pending[self._max :]
                if not batch:
                    self._flushing = False
                    return
            try:
                landed = self._driver.ack_many([p.ack for p in batch])
            except Exception as exc:  # every caller in the batch hears the fault; their leases lapse
                for p in batch:
                    p.error = exc
                    p.done.set()
                continue
            for p in batch:
                p.landed = p.ack.job_id in landed
                p.done.set()
