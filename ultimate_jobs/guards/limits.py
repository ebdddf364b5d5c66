"""The worker's limits: in-process ``per_tenant``, ``per_queue``, ``global`` and ``rate_per_tenant``, and the
fleet-wide ``fleet_per_tenant``.

The in-process caps are this process's only — multiplied by your replica count, and the rate window is
in memory (a restart grants a fresh allowance). Size them as a per-pod budget. The fleet-wide caps are
held in the driver's lease store, across every worker process: ``fleet_per_tenant`` (at most N running
jobs of one org in a queue) and a job's ``concurrency``. Over any cap the worker hands the claim
straight back without burning an attempt.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.clock import Clock
from ..core.durations import Duration, parse_duration
from ..errors import InvariantError

LIMIT_KEYS = ("PER_TENANT", "PER_QUEUE", "GLOBAL", "RATE_PER_TENANT", "FLEET_PER_TENANT")
"""The keys ``ULTIMATE_JOBS['LIMITS']`` takes."""

_SWEEP_FLOOR = 1_024  # rate-window state for this many tenants before the first sweep of stale ones


@dataclass(frozen=True, slots=True)
class LimitConfig:
    """Per-process caps, and the fleet-wide cap per org. ``rate_per_tenant=(10, "1s")`` starts at most 10
    runs per tenant per second in this process; ``fleet_per_tenant={"payments": 5}`` runs at most 5 jobs of
    one org in the ``payments`` queue at once across every worker.

    >>> LimitConfig(per_tenant=2, per_queue={"emails": 4}, global_=16, rate_per_tenant=(10, "1s"))
    """

    per_tenant: int | None = None
    per_queue: Mapping[str, int] = field(default_factory=dict)
    global_: int | None = None
    rate_per_tenant: tuple[int, Duration] | None = None
    fleet_per_tenant: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, raw: object) -> LimitConfig:
        """Build from ``ULTIMATE_JOBS['LIMITS']``: a dict of ``PER_TENANT``, ``PER_QUEUE`` (queue → cap),
        ``GLOBAL``, ``RATE_PER_TENANT`` (``(count, window)``) and ``FLEET_PER_TENANT`` (queue → cap per org,
        fleet-wide). Any other shape is ``X_INVARIANT``.

        >>> LimitConfig.from_settings({"PER_TENANT": 2, "RATE_PER_TENANT": (10, "1s")})
        """
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise InvariantError(f"LIMITS must be a dict, not {type(raw).__name__}", {"field": "LIMITS"})
        unknown = set(raw) - set(LIMIT_KEYS)
        if unknown:
            raise InvariantError(
                f"LIMITS has unknown keys {sorted(map(repr, unknown))}; known: {', '.join(LIMIT_KEYS)}", {}
            )
        per_queue = raw.get("PER_QUEUE") or {}
        if not isinstance(per_queue, Mapping) or not all(isinstance(q, str) and q for q in per_queue):
            raise InvariantError("LIMITS['PER_QUEUE'] must map queue names to caps", {"field": "per_queue"})
        fleet = raw.get("FLEET_PER_TENANT") or {}
        if not isinstance(fleet, Mapping) or not all(isinstance(q, str) and q for q in fleet):
            raise InvariantError(
                "LIMITS['FLEET_PER_TENANT'] must map queue names to caps, e.g. {'payments': 5}",
                {"field": "fleet_per_tenant"},
            )
        rate = raw.get("RATE_PER_TENANT")
        if rate is not None and (not isinstance(rate, tuple | list) or len(rate) != 2):
            raise InvariantError(
                f"LIMITS['RATE_PER_TENANT'] must be a pair (count, window), got {rate!r}", {"field": "rate_per_tenant"}
            )
        config = cls(
            per_tenant=raw.get("PER_TENANT"),
            per_queue=dict(per_queue),
            global_=raw.get("GLOBAL"),
            rate_per_tenant=(rate[0], rate[1]) if rate is not None else None,
            fleet_per_tenant=dict(fleet),
        )
        config.validate()
        return config

    def validate(self) -> None:
        """Refuse a cap that is not a whole number >= 1 (``X_INVARIANT``)."""

        def positive(value: object, name: str) -> None:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InvariantError(f"limits.{name} must be a whole number >= 1, got {value!r}", {"field": name})

        positive(self.per_tenant, "per_tenant")
        positive(self.global_, "global")
        for queue, cap in self.per_queue.items():
            positive(cap, f"per_queue[{queue!r}]")
        for queue, cap in self.fleet_per_tenant.items():
            positive(cap, f"fleet_per_tenant[{queue!r}]")
        if self.rate_per_tenant is not None:
            count, window = self.rate_per_tenant
            positive(count, "rate_per_tenant[0]")
            if parse_duration(window, field="rate_per_tenant window") <= 0:
                raise InvariantError("limits.rate_per_tenant window must be positive", {"field": "rate_per_tenant"})


class Limiter:
    """Counts in-flight runs by tenant, queue and in all, and starts per tenant in a sliding window."""

    def __init__(self, config: LimitConfig, clock: Clock) -> None:
        config.validate()
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._tenant: dict[str, int] = defaultdict(int)
        self._queue: dict[str, int] = defaultdict(int)
        self._total = 0
        self._starts: dict[str, deque[int]] = defaultdict(deque)
        self._window_ms = parse_duration(config.rate_per_tenant[1]) if config.rate_per_tenant else 0
        self._sweep_at = _SWEEP_FLOOR

    def admit(self, *, queue: str, tenant_id: str | None) -> bool:
        """Take a place for one run, or answer ``False`` when any cap is full."""
        c = self._config
        tenant = tenant_id or ""
        with self._lock:
            if c.global_ is not None and self._total >= c.global_:
                return False
            cap = c.per_queue.get(queue)
            if cap is not None and self._queue[queue] >= cap:
                return False
            if tenant_id is not None and c.per_tenant is not None and self._tenant[tenant] >= c.per_tenant:
                return False
            if tenant_id is not None and c.rate_per_tenant is not None:
                starts = self._starts[tenant]
                now = self._clock.now_ms()
                while starts and starts[0] <= now - self._window_ms:
                    starts.popleft()
                if len(starts) >= c.rate_per_tenant[0]:
                    return False
                starts.append(now)
                if len(self._starts) > self._sweep_at:
                    self._sweep(now)
            self._total += 1
            self._queue[queue] += 1
            self._tenant[tenant] += 1
            return True

    def release(self, *, queue: str, tenant_id: str | None) -> None:
        """Give back the place :meth:`admit` took."""
        with self._lock:
            self._total -= 1
            _drop_one(self._queue, queue)
            _drop_one(self._tenant, tenant_id or "")

    def _sweep(self, now: int) -> None:
        """Forget tenants whose every start left the window, so a process that has seen a million
        orgs holds state for the active ones only (callers hold the lock)."""
        for tenant in [t for t, starts in self._starts.items() if starts[-1] <= now - self._window_ms]:
            del self._starts[tenant]
        self._sweep_at = max(_SWEEP_FLOOR, 2 * len(self._starts))


def _drop_one(counts: dict[str, int], key: str) -> None:
    """Decrement ``counts[key]``, deleting the entry at zero: the maps stay as small as the work in flight."""
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
