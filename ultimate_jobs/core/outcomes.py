"""What an attempt answers and what it talks to: :class:`JobExecution` (how one attempt ended),
:class:`Settled` (what ``on_settled`` is told), and what a runner (the worker, ``run_jobs``) gives an
attempt — :class:`AttemptEnv`, the environment every attempt shares, with the :class:`Acker` that
settles a completion, and the :class:`ExecutionHooks` one attempt reports into."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import quote

from ..contracts.jobs import Ack, ClaimRef, JobOutcome
from ..contracts.protocol import JobDriver
from ..defaults import DEFAULT_VISIBILITY_TIMEOUT_MS
from ..errors import UltimateError
from .clock import Clock

StopReason = Literal["terminal", "attempts-exhausted"]
ENDINGS: frozenset[JobOutcome] = frozenset({"completed", "dead-lettered", "dropped", "refused"})


class Acker(Protocol):
    """What settles a completed attempt: the driver itself, or the worker's batcher over ``ack_many``."""

    def ack(self, job_id: str, ref: ClaimRef, *, duration_ms: int | None = None, wait_ms: int | None = None) -> bool:
        """Settle the row ``done``, fenced on ``ref``; answers whether it landed. ``wait_ms``: from the row's run
        time to the attempt's start (its queue's wait histogram)."""


def no_context() -> None:
    """The ctx factory when ``ULTIMATE_JOBS['CONTEXT']`` names none: every run gets ``ctx=None`` (an async
    attempt builds its state on the loop then: no factory of the app's to keep off it)."""
    return None


@dataclass(frozen=True, slots=True)
class AttemptEnv:
    """What every attempt a runner starts shares: the ``driver`` it settles through, the ``clock`` (the
    configured one when ``None``), the app's ``context`` factory, the lease window a fleet slot is taken
    for, the retry jitter's ``rng``, and who acks a completion.

    >>> execute_job(claimed, AttemptEnv(driver=driver, clock=clock))
    """

    driver: JobDriver
    clock: Clock | None = None
    context: Callable[[], Any] | None = None
    visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS
    rng: random.Random | None = None
    acker: Acker | None = None
    """What settles a completion the attempt waits for; the driver when ``None``."""
    leave_completions: bool = False
    """The runner settles completions itself, in batches (the worker): a completed attempt of a job
    without ``on_settled`` (nobody inside the attempt waits on its settle) answers its ack in
    :attr:`JobExecution.completion` instead of settling it."""
    fleet_per_tenant: Mapping[str, int] = field(default_factory=dict)
    """Queue → how many jobs of one org may run in it at once across the fleet (``LIMITS["FLEET_PER_TENANT"]``):
    a run of an org at its cap is handed back uncounted, as a busy concurrency key is."""


class ExecutionHooks(Protocol):
    """What the worker hears from inside an attempt."""

    def slot_taken(self, key: str, holder: str) -> None:
        """The run holds fleet slot ``key`` as ``holder`` until the attempt ends."""

    def settling(self) -> None:
        """The attempt is about to settle its row; the lease is no longer the worker's to renew."""

    def keep(self, until_ms: int) -> bool:
        """The run's start is reserved for ``until_ms`` (its rate limit), at most
        :data:`~ultimate_jobs.core.rates.RATE_KEEP_MS` away: answer ``True`` to keep its claim (and lease)
        off its slot and run it again before then — the attempt ends unsettled, ``kept_until_ms`` set —
        or ``False`` to have it handed back to the queue, due just ahead of that instant."""


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
    slot_keys: tuple[str, ...] = field(default=(), repr=False)
    """The fleet slots the run holds (its org's cap, its concurrency key), released when it ends."""
    kept_until_ms: int | None = None
    """The instant the run's start is reserved for, when its runner keeps the claim until then
    (:meth:`ExecutionHooks.keep`): nothing was settled, and the runner runs the attempt again before it."""
    completion: Ack | None = None
    """A completion the attempt left to its runner to settle (:attr:`AttemptEnv.leave_completions`):
    ``landed`` is known once the runner settled it (:func:`ultimate_jobs.core.attempt.completion_settled`)."""


def tenant_lease_key(queue: str, tenant_id: str) -> str:
    """The fleet slot a run of ``tenant_id`` counts under in ``queue`` (``LIMITS["FLEET_PER_TENANT"]``):
    ``tenant:<encoded queue>:<tenant>``, apart from every job's keys."""
    return f"tenant:{quote(queue, safe='')}:{tenant_id}"


def job_lease_key(name: str, key: str | None = None) -> str:
    """The fleet slot a run counts under: ``job:<name>`` for a plain cap, ``job-key:<encoded name>:<key>``
    for a keyed one — apart, so no job name can collide with another job's key."""
    return f"job:{name}" if key is None else f"job-key:{quote(name, safe='')}:{key}"
