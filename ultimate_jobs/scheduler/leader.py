"""Who leads: a lease with an expiry, renewed by the holder, taken over once it lapses.

``acquire()`` is both the first take and every renewal — the scheduler calls it every
``renew_every_ms`` (a third of the TTL), leader and standby alike, which is how a demoted node finds
out and how a standby notices the lease lapsed. ``term`` changes whenever the lease is taken afresh
(not renewed), so the scheduler knows its in-memory watermarks may be stale.

The lease itself is the driver's (``driver.leader``: a row in ``x_job_scheduler_leases`` on Postgres, a
map on the memory driver); :class:`LeaseLeader` holds this scheduler's side of it — its holder name,
its TTL and the terms it counted. :class:`MemoryLeader` is always the leader, for tests only.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Protocol

from ..contracts.protocol import JobDriver, LeaderStore
from ..core.clock import Clock
from ..core.durations import Duration, parse_duration
from ..core.installed import job_clock
from ..errors import InvariantError, NotImplementedOnDriverError

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

    def acquire(self, *, rollup: bool = False) -> bool:
        """Take or renew the lease; ``False`` while another holder's lease is live. With ``rollup``, the
        counter rollup runs in the same round trip when the lease landed — asked only of a leader that
        :meth:`carries_rollup_of` the scheduler's driver."""

    def carries_rollup_of(self, driver: JobDriver) -> bool:
        """Whether :meth:`acquire` can fold ``driver``'s counter rollup into its renewal (its lease lives
        in that driver): else the scheduler calls ``driver.rollup_counters()`` itself."""

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


class MemoryLeader:
    """Always the leader, holding no lease — for tests only: two schedulers with it both lead, and only
    the watermark fence stands between them.

    >>> leader = MemoryLeader()
    """

    durable = False

    def __init__(self, *, holder: str | None = None, ttl: Duration = DEFAULT_LEASE_TTL_MS) -> None:
        self.holder = holder or default_holder()
        self.ttl_ms = _ttl(ttl)
        self._terms = _Terms()

    @property
    def renew_every_ms(self) -> int:
        return max(1, self.ttl_ms // 3)

    @property
    def term(self) -> int:
        return self._terms.term

    def acquire(self, *, rollup: bool = False) -> bool:
        self._terms.landed(0)
        return True

    def carries_rollup_of(self, driver: JobDriver) -> bool:
        return False  # no lease: nothing to fold the rollup into

    def release(self) -> None:
        self._terms.lost()


class LeaseLeader:
    """The lease ``name`` in ``driver.leader``, taken and renewed for ``holder``. Build it with
    :func:`lease_leader`. Durable when the driver's lease store is (Postgres): then every scheduler
    process against that database contends for the one lease."""

    def __init__(
        self, driver: JobDriver, *, store: LeaderStore, ttl_ms: int, holder: str, clock: Clock | None, name: str
    ) -> None:
        self.driver = driver
        self.store = store
        self.durable = store.durable
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

    def acquire(self, *, rollup: bool = False) -> bool:
        """Take or renew the lease. With ``rollup``, the driver also folds its counters in the same round
        trip when the lease lands (``LeaderStore.acquire``) — the leader's once-a-minute duty."""
        now = (self._clock or job_clock()).now_ms()
        lease = self.store.acquire(self.name, self.holder, ttl_ms=self.ttl_ms, now_ms=now, rollup=rollup)
        if lease is None:
            self._terms.lost()
            return False
        self._terms.landed(lease.acquired_at_ms)
        return True

    def release(self) -> None:
        self._terms.lost()
        self.store.release(self.name, self.holder)

    def carries_rollup_of(self, driver: JobDriver) -> bool:
        return driver is self.driver  # the lease row and the counters live in the same store


def memory_leader(*, holder: str | None = None, ttl: Duration = DEFAULT_LEASE_TTL_MS) -> MemoryLeader:
    """The always-leader: tests only."""
    return MemoryLeader(holder=holder, ttl=ttl)


def lease_leader(
    driver: JobDriver,
    *,
    ttl: Duration = DEFAULT_LEASE_TTL_MS,
    holder: str | None = None,
    clock: Clock | None = None,
    name: str = LEADER_LEASE_NAME,
) -> LeaseLeader:
    """The leader over ``driver``'s lease store — what :func:`~ultimate_jobs.job_scheduler` uses unless
    told otherwise: a lease with an expiry (on Postgres a row in ``x_job_scheduler_leases``), renewed
    every third of ``ttl`` (30 s: every 10 s). A SIGKILLed leader's lease lapses after ``ttl`` and a
    standby takes over at its next ask. ``X_NOT_IMPLEMENTED`` when the driver has no lease store.

    >>> leader = lease_leader(job_driver(), ttl="30s")
    """
    store = driver.leader
    if store is None:
        raise NotImplementedOnDriverError(
            f"driver {driver.name!r} declares leader=None (no lease store for a leader election); pass "
            "job_scheduler(leader=...) a Leader of your own",
            {"driver": driver.name},
        )
    return LeaseLeader(driver, store=store, ttl_ms=_ttl(ttl), holder=holder or default_holder(), clock=clock, name=name)
