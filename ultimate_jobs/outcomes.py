"""What an attempt answers and what it talks to: :class:`JobExecution` (how one attempt ended),
:class:`Settled` (what ``on_settled`` is told), and the seams the worker plugs into an attempt —
the :class:`Acker` that settles a completion and the :class:`ExecutionHooks` it hears."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import quote

from .drivers.base import ClaimRef, JobOutcome
from .errors import UltimateError

StopReason = Literal["terminal", "attempts-exhausted"]
ENDINGS: frozenset[JobOutcome] = frozenset({"completed", "dead-lettered", "dropped", "refused"})


class Acker(Protocol):
    """What settles a completed attempt in place of the driver: the worker's batcher over ``ack_many``."""

    supports_deferred_ack: bool
    """Whether :meth:`ack_later` queues a settle the attempt does not wait for (the worker's settle
    buffer); ``False``: every completion settles through :meth:`ack`."""

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None) -> bool:
        """Settle the row ``done``, fenced on ``ref``; answers whether it landed."""

    def ack_later(
        self,
        job_id: str,
        ref: ClaimRef,
        *,
        duration_ms: int | None,
        then: Callable[[bool, BaseException | None], None],
    ) -> None:
        """Queue the row to settle ``done``; ``then(landed, error)`` runs once the settle came back."""


class ExecutionHooks(Protocol):
    """What the worker hears from inside an attempt."""

    def slot_taken(self, key: str, holder: str) -> None:
        """The run holds fleet slot ``key`` as ``holder`` until the attempt ends."""

    def settling(self) -> None:
        """The attempt is about to settle its row; the lease is no longer the worker's to renew."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What ``on_settled`` is told, once per ending: the outcome, the input (``None`` when the stored
    payload no longer parses), the body's ``result`` (completed only), the ``error`` and its ``code``."""

    outcome: JobOutcome
    job_id: str
    run_id: str
    name: str
    attempt: int
    input: Any
    result: Any = None
    error: str | None = None
    code: str | None = None
    ctx: Any = None
    tenant_id: str | None = None


@dataclass(slots=True)
class JobExecution:
    """How one attempt ended. ``outcome`` is ``None`` when the claim was handed back without running
    (a busy key under ``when_busy="wait"``, a job this process does not know)."""

    job_id: str
    name: str
    queue: str
    attempt: int
    final_attempt: bool
    outcome: JobOutcome | None = None
    landed: bool = False
    result: Any = None
    error: BaseException | None = None
    code: str | None = None
    stop_reason: StopReason | None = None
    resume_at_ms: int | None = None
    duration_ms: int = 0
    abandoned: bool = False
    on_settled_error: UltimateError | None = None
    slot_key: str | None = field(default=None, repr=False)
    deferred: bool = False
    """The completion was handed to a settle buffer: ``landed`` is known only once ``settled_later`` ran."""


def job_lease_key(name: str, key: str | None = None) -> str:
    """The fleet slot a run counts under: ``job:<name>`` for a plain cap, ``job-key:<encoded name>:<key>``
    for a keyed one — apart, so no job name can collide with another job's key."""
    return f"job:{name}" if key is None else f"job-key:{quote(name, safe='')}:{key}"
