"""The base every built-in driver extends, as Django's ``BaseTaskBackend`` is for task backends: each
declared capability with its default, ``claim()``'s checks before the driver's own claim, ``ack`` as one
``ack_many``, and :meth:`BaseDriver.check` — what ``manage.py check`` reports of the driver. A driver may
also be written against :class:`~ultimate_jobs.contracts.protocol.JobDriver` alone (it declares every
capability itself, and the check verifies it with :func:`undeclared_capabilities`).

>>> class MyDriver(BaseDriver):
...     name = "mine"
...     def _claim_checked(self, *, queues, limit, worker_id, window_ms, drop_exhausted, queue_limits, record): ...
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from ..defaults import DEFAULT_VISIBILITY_TIMEOUT_MS
from ..errors import ClaimQueuesEmptyError
from .jobs import Ack, Claim, ClaimRef
from .operator import WorkerInfo
from .protocol import DECLARED_CAPABILITIES


class BaseDriver(ABC):
    """The shared part of a driver. A subclass names itself (``name``), sets what it can do — ``alias``,
    ``supports_wake``/``supports_listen``, ``async_enqueue``, the stores it has as properties — and
    implements :meth:`_claim_checked` and ``ack_many`` with the rest of the protocol. What it leaves out
    is declared for it: no wake, no native async enqueue, and no operator store, leases, rate schedules,
    leader, scheduler state or backfill ledger (``None``: the features over them say so, never probe)."""

    name: str = ""
    """The driver's name, for messages and the console: every driver sets its own."""
    alias: str | None = None
    supports_wake: bool = False
    supports_listen: bool = False
    async_enqueue: Any = None
    visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS
    fair_queues: frozenset[str] = frozenset()

    @property
    def operator(self) -> Any:
        """The operator's store (reads and operator actions): none unless the driver has one."""
        return None

    @property
    def leases(self) -> Any:
        """The fleet-wide lease store (concurrency keys, per-tenant caps): none unless the driver has one."""
        return None

    @property
    def rates(self) -> Any:
        """The fleet-wide rate schedules: none unless the driver has them."""
        return None

    @property
    def leader(self) -> Any:
        """The leader-election lease store: none unless the driver has one."""
        return None

    @property
    def scheduler_state(self) -> Any:
        """The scheduler's watermarks and fires: none unless the driver has them."""
        return None

    @property
    def backfills(self) -> Any:
        """The backfill ledger: none unless the driver has one."""
        return None

    def claim(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        visibility_timeout_ms: int | None = None,
        drop_exhausted: frozenset[str] = frozenset(),
        queue_limits: Mapping[str, int] | None = None,
        record: WorkerInfo | None = None,
    ) -> Claim:
        """The protocol's ``claim()``: a claim that names no queue is ``X_JOB_CLAIM_QUEUES_EMPTY``, and the lease
        window is ``visibility_timeout_ms`` unless the caller names one; then :meth:`_claim_checked`."""
        if not queues:
            raise ClaimQueuesEmptyError("claim() named no queue; pass at least one queue name", {})
        window_ms = self.visibility_timeout_ms if visibility_timeout_ms is None else visibility_timeout_ms
        return self._claim_checked(
            queues=queues,
            limit=limit,
            worker_id=worker_id,
            window_ms=window_ms,
            drop_exhausted=drop_exhausted,
            queue_limits=queue_limits,
            record=record,
        )

    @abstractmethod
    def _claim_checked(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        window_ms: int,
        drop_exhausted: frozenset[str],
        queue_limits: Mapping[str, int] | None,
        record: WorkerInfo | None,
    ) -> Claim:
        """``claim()`` past its checks: ``queues`` holds at least one name, ``window_ms`` is the lease."""

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None, wait_ms: int | None = None) -> bool:
        """The protocol's ``ack()``: one :meth:`ack_many`."""
        return job_id in self.ack_many([Ack(job_id, ref, duration_ms or 0, wait_ms)])

    @abstractmethod
    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        """Complete each owned row of ``acks``; answers the ids that landed."""

    def check(self) -> list[str]:
        """What ``manage.py check`` reports of this driver, one line each (``X_SETTINGS_DRIVER_UNDECLARED``):
        a capability declared wrongly. A subclass with more to verify extends it."""
        return undeclared_capabilities(self)


def undeclared_capabilities(driver: object) -> list[str]:
    """What ``driver`` leaves undeclared or declares wrongly, one line each — empty for a driver that
    declares every capability of :data:`~ultimate_jobs.contracts.protocol.DECLARED_CAPABILITIES` and the
    wake methods its flags promise."""
    missing = [f"{attr} ({meaning})" for attr, meaning in DECLARED_CAPABILITIES if not hasattr(driver, attr)]
    for flag in ("supports_wake", "supports_listen"):
        if hasattr(driver, flag) and not isinstance(getattr(driver, flag), bool):
            missing.append(f"{flag} must be True or False, not {getattr(driver, flag)!r}")
    promised = (("supports_wake", "subscribe"), ("supports_listen", "wake_is_live"))
    for flag, method in promised:
        if getattr(driver, flag, False) is True and not callable(getattr(driver, method, None)):
            missing.append(f"{method}() (declared by {flag} = True)")
    if getattr(driver, "supports_listen", False) is True and getattr(driver, "supports_wake", False) is not True:
        missing.append("supports_wake = True (supports_listen is a wake that crosses processes)")
    return missing
