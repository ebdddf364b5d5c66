"""Rate limits across the fleet: at most N starts per period, per key, for every worker process.

A :class:`RateLimit` names a rate; ``@job(rate_limit=...)`` holds a job's starts to it — alone (a rate
string: the limit is the job's own) or shared with every job that names the same ``RateLimit`` (one per
external API, say) — per ``rate_key(input)`` when one is given (per org, per account).

The driver keeps each key's schedule (:class:`~ultimate_jobs.contracts.protocol.RateStore`) as a generic
cell rate algorithm: one start every ``interval_ms`` (the period over the count, rounded up), so no window
of one period ever holds more than ``count`` starts, plus one at its edge. A start that finds its key busy
takes the next free instant: within :data:`RATE_HOLD_MS` it is the run's own, to wait for in its slot and
start on with no second take; further, it is reserved for the run, which its worker keeps off its slot until
just before (within :data:`RATE_KEEP_MS`) or hands back, uncounted, due :data:`RATE_LEAD_MS` before it; when
it comes back it spends that reservation without taking another. One statement (Postgres, SQLite) or one
script (Redis) per take.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import JobRateLimitInvalidError
from .durations import parse_duration

MAX_RATE_PER_SECOND = 1_000
"""The fastest rate one key takes: the drivers schedule starts to the millisecond."""

RATE_HOLD_MS = 250
"""A run whose instant is this close waits for it in its slot and starts on it — the take's ``near_ms``: the
store keeps no reservation for it, and no second take is made — instead of a hand-back and a claim, which
take longer than that on a busy host and would let the instant lapse."""

RATE_LEAD_MS = 200
"""A run handed back to its reserved instant is due this much before it: claimed by then, it waits the
rest in its slot (:data:`RATE_HOLD_MS`) and starts on time."""

RATE_KEEP_MS = 2_000
"""A worker keeps a run whose reserved instant is further than :data:`RATE_HOLD_MS` but at most this far
away: the claim (and its lease) stay with the worker, off its slot, and the run comes back to its slot ahead
of the claim-ahead buffer :data:`RATE_HOLD_MS` ``// 2`` before its instant. A hand-back could lose the
instant: a run due again behind an older backlog is claimed only after it, when its reservation has lapsed."""

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\S+)\s*$")
_UNITS = {"s": "1s", "sec": "1s", "second": "1s", "m": "1m", "min": "1m", "minute": "1m", "h": "1h", "hour": "1h"}


def parse_rate(text: object, *, field: str = "rate_limit") -> tuple[int, int]:
    """``"10/s"``, ``"600/m"``, ``"5/10s"``: ``(count, period in ms)``; anything else, a count below 1 or
    faster than 1,000 a second, is ``X_JOB_RATE_LIMIT_INVALID``.

    >>> parse_rate("10/s"), parse_rate("5/10s")
    ((10, 1000), (5, 10000))
    """
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise JobRateLimitInvalidError(
            f"{field}: {text!r} is not a rate; write a count over a period, e.g. '10/s', '600/m' or '5/10s'",
            {"field": field},
        )
    count = int(match.group(1))
    period = _UNITS.get(match.group(2), match.group(2))
    try:
        period_ms = parse_duration(period, field=field)
    except Exception:
        raise JobRateLimitInvalidError(
            f"{field}: {text!r} names no period after '/'; write s, m, h or a duration such as 10s",
            {"field": field},
        ) from None
    if count < 1 or period_ms < 1:
        raise JobRateLimitInvalidError(
            f"{field}: {text!r} allows nothing; a rate needs a count of at least 1 over a positive period",
            {"field": field},
        )
    if count * 1000 > MAX_RATE_PER_SECOND * period_ms:
        raise JobRateLimitInvalidError(
            f"{field}: {text!r} is faster than {MAX_RATE_PER_SECOND:,} a second, the finest one key schedules; "
            "split the work over more keys (rate_key=)",
            {"field": field},
        )
    return count, period_ms


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A named rate, shared by every job that names it: at most ``count`` starts per period per key,
    across every worker process.

    >>> PAYMENTS_API = RateLimit("payments-api", "10/s")
    >>> @job(..., rate_limit=PAYMENTS_API, rate_key=lambda i: i.org_id)   # 10 calls a second per org
    """

    name: str
    rate: str
    count: int = field(init=False)
    period_ms: int = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 300:
            raise JobRateLimitInvalidError(
                f"RateLimit name must be a non-empty string of at most 300 characters, got {self.name!r}",
                {"field": "name"},
            )
        count, period_ms = parse_rate(self.rate, field=f"RateLimit {self.name!r}")
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "period_ms", period_ms)

    @property
    def interval_ms(self) -> int:
        """The spacing between two starts of one key: the period over the count, rounded up (never faster)."""
        return math.ceil(self.period_ms / self.count)

    def key_for(self, rate_key: str | None) -> str:
        """The driver's key for one ``rate_key`` (or the whole limit's, with none)."""
        return self.name if rate_key is None else f"{self.name}:{rate_key}"

    def as_dict(self) -> dict[str, object]:
        """The descriptor shape."""
        return {"name": self.name, "rate": self.rate, "interval_ms": self.interval_ms}


def limit_of(key: str, names: Iterable[str]) -> str | None:
    """The limit among ``names`` a driver's rate ``key`` counts under — the longest that is the key or
    prefixes it with ``":"`` (``"api:v2"`` over ``"api"`` for ``"api:v2:org-a"``) — or ``None``."""
    matching = [name for name in names if key == name or key.startswith(f"{name}:")]
    return max(matching, key=len) if matching else None


def declared_rate_limits() -> dict[str, tuple[RateLimit, tuple[str, ...]]]:
    """Every rate limit a registered job declares, by name, with the jobs that name it."""
    from . import registry

    found: dict[str, tuple[RateLimit, list[str]]] = {}
    for handle in registry.registered("job"):
        limit = getattr(handle, "rate_limit", None)  # a job's handle; reading it needs no import of its class
        if isinstance(limit, RateLimit):
            found.setdefault(limit.name, (limit, []))[1].append(handle.name)
    return {name: (limit, tuple(sorted(jobs))) for name, (limit, jobs) in sorted(found.items())}
