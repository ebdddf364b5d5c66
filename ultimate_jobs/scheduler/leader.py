"""Who leads: a lease with an expiry, renewed by the holder, taken over once it lapses.

``acquire()`` is both the first take and every renewal — the scheduler calls it every
``renew_every_ms`` (a third of the TTL), leader and standby alike, which is how a demoted node finds
out and how a standby notices the lease lapsed. ``term`` changes whenever the lease is taken afresh
(not renewed), so the scheduler knows its in-memory watermarks may be stale.

Not ``pg_try_advisory_lock``: an advisory lock belongs to a Postgres session, and the executor is a
pool — the lock would be dropped when the connection went back, and every node would read itself as
leader. The lease is a row, and needs no connection affinity.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from typing import Protocol

from ..clock import Clock
from ..conf import job_clock
from ..drivers.postgres.executor import Executor
from ..durations import Duration, parse_duration
from ..errors import InvariantError
from . import sql

DEFAULT_LEASE_TTL_MS = 30_000
LEADER_LEASE_NAME = "scheduler"


class Leader(Protocol):
    """A leader election the scheduler asks every ``renew_every_ms``."""

    holder: str
    ttl_ms: int
    durable: bool

    @property
    def renew_every_ms(self) -> int:
        """How often the scheduler asks: a third of the TTL."""

    @property
    def term(self) -> int:
        """Bumped each time the lease is taken afresh (never by a renewal of a live lease)."""

    def acquire(self) -> bool:
        """Take or renew the lease; ``False`` while another holder's lease is live."""

    def release(self) -> None:
        """Hand the lease back (a clean stop); a standby takes it at its next ask."""


def default_holder() -> str:
    """``host-pid-random``: unique per scheduler instance, readable in the lease row."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _ttl(ttl: Duration) -> int:
    ms = parse_duration(ttl, field="lease ttl")
    if ms < 3:
        raise InvariantError(f"a leader lease needs a TTL of at least 3 ms (renewed every third), got {ms}", {})
    return ms


class _Terms:
    """Counts terms from the ``acquired_at`` each landed acquire answers."""

    def __init__(self) -> None:
        self.term = 0
        self._acquired_at: int | None = None

    def landed(self, acquired_at: int) -> None:
        if acquired_at != self._acquired_at:
            self._acquired_at = acquired_at
            self.term += 1

    def lost(self) -> None:
        self._acquired_at = None


class MemoryLease:
    """A lease row held in one process, which several :class:`MemoryLeader` instances contend for
    (tests of failover; ``jobs_dev``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: str | None = None
        self.acquired_at_ms = 0
        self.expires_at_ms = 0


class MemoryLeader:
    """The in-memory default. With no ``lease`` it is always the leader — for tests and ``jobs_dev``
    only: two processes with this default both lead. With a shared :class:`MemoryLease` it behaves
    like the Postgres lease inside one process.

    >>> leader = MemoryLeader()                       # always the leader
    >>> shared = MemoryLease()
    >>> a, b = MemoryLeader(lease=shared, clock=clock), MemoryLeader(lease=shared, clock=clock)
    """

    durable = False

    def __init__(
        self,
        *,
        lease: MemoryLease | None = None,
        holder: str | None = None,
        ttl: Duration = DEFAULT_LEASE_TTL_MS,
        clock: Clock | None = None,
    ) -> None:
        self.lease = lease
        self.holder = holder or default_holder()
        self.ttl_ms = _ttl(ttl)
        self._clock = clock
        self._terms = _Terms()

    @property
    def renew_every_ms(self) -> int:
        return max(1, self.ttl_ms // 3)

    @property
    def term(self) -> int:
        return self._terms.term

    def acquire(self) -> bool:
        if self.lease is None:
            self._terms.landed(0)
            return True
        now = (self._clock or job_clock()).now_ms()
        lease = self.lease
        with lease.lock:
            if lease.holder is not None and lease.holder != self.holder and lease.expires_at_ms > now:
                self._terms.lost()
                return False
            if lease.holder != self.holder or lease.expires_at_ms <= now:
                lease.holder, lease.acquired_at_ms = self.holder, now
            lease.expires_at_ms = now + self.ttl_ms
            self._terms.landed(lease.acquired_at_ms)
            return True

    def release(self) -> None:
        self._terms.lost()
        if self.lease is None:
            return
        with self.lease.lock:
            if self.lease.holder == self.holder:
                self.lease.holder, self.lease.expires_at_ms = None, 0


class PostgresLeaseLeader:
    """The lease row ``x_job_scheduler_leases[name]``, taken and renewed with ``SQL_LEADER_ACQUIRE``.
    Build it with :func:`postgres_lease_leader`."""

    durable = True

    def __init__(self, executor: Executor, *, ttl_ms: int, holder: str, clock: Clock | None, name: str) -> None:
        self.executor = executor
        self.ttl_ms = ttl_ms
        self.holder = holder
        self.name = name
        self._clock = clock
        self._terms = _Terms()

    @property
    def renew_every_ms(self) -> int:
        return max(1, self.ttl_ms // 3)

    @property
    def term(self) -> int:
        return self._terms.term

    def _params(self) -> dict[str, object]:
        now = (self._clock or job_clock()).now_ms()
        return {"name": self.name, "holder": self.holder, "now": now, "ttl": self.ttl_ms}

    def acquire(self) -> bool:
        rows = self.executor.query(sql.SQL_LEADER_ACQUIRE, self._params())
        return self._answer(rows[0][0] if rows else None)

    def acquire_and_rollup(self) -> tuple[bool, int]:
        """:meth:`acquire` and, when it lands, the counter rollup in the same statement (the leader's
        once-a-minute duty, at no statement of its own). Answers (leading, buckets folded)."""
        [(acquired_at, folded)] = self.executor.query(sql.SQL_LEADER_ACQUIRE_ROLLUP, self._params())
        return self._answer(acquired_at), int(folded)

    def _answer(self, acquired_at: int | None) -> bool:
        if acquired_at is None:
            self._terms.lost()
            return False
        self._terms.landed(int(acquired_at))
        return True

    def release(self) -> None:
        self._terms.lost()
        self.executor.query(sql.SQL_LEADER_RELEASE, {"name": self.name, "holder": self.holder})


def memory_leader(
    *,
    lease: MemoryLease | None = None,
    holder: str | None = None,
    ttl: Duration = DEFAULT_LEASE_TTL_MS,
    clock: Clock | None = None,
) -> MemoryLeader:
    """The in-memory leader (always the leader without a shared ``lease``): tests and ``jobs_dev`` only."""
    return MemoryLeader(lease=lease, holder=holder, ttl=ttl, clock=clock)


def postgres_lease_leader(
    executor: Executor,
    *,
    ttl: Duration = DEFAULT_LEASE_TTL_MS,
    holder: str | None = None,
    clock: Clock | None = None,
    name: str = LEADER_LEASE_NAME,
) -> PostgresLeaseLeader:
    """The leader for any real deployment: a lease row with an expiry in ``x_job_scheduler_leases``,
    renewed every third of ``ttl`` (30 s: every 10 s). A SIGKILLed leader's lease lapses after ``ttl``
    and a standby takes over at its next ask.

    >>> from ultimate_jobs.drivers.postgres.executor import django_executor
    >>> leader = postgres_lease_leader(django_executor("default"), ttl="30s")
    """
    return PostgresLeaseLeader(executor, ttl_ms=_ttl(ttl), holder=holder or default_holder(), clock=clock, name=name)
