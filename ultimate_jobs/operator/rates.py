"""The operator surface over rate limits: every declared limit, and each key's schedule across the fleet."""

from __future__ import annotations

from ..contracts.protocol import JobDriver
from ..core.rates import declared_rate_limits, limit_of
from ..errors import NotImplementedOnDriverError
from ..guards.org_boundary import refuse_fleet_view
from ._support import resolve
from .records import RateRow


def inspect_rates(*, driver: JobDriver | None = None) -> list[RateRow]:
    """Each declared rate limit with the schedule of every key it has counted starts under (the driver's
    ``rates.state()``, at most 1,000 keys): when the key's next start may come without waiting, and how
    many runs wait on reserved instants. A declared limit no start has used yet is one row with no key.

    >>> [(r.limit, r.key, r.rate, r.reserved) for r in inspect_rates()]
    """
    refuse_fleet_view("inspect_rates")
    found = resolve(driver)
    store = found.rates
    if store is None:
        raise NotImplementedOnDriverError(
            f"inspect_rates needs the driver's rate schedules, and the {found.name!r} driver keeps none. Fix: run "
            "it against one of the built-in drivers (postgres, sqlite, redis, memory)",
            {"driver": found.name, "capability": "rates"},
        )
    declared = declared_rate_limits()
    rows: list[RateRow] = []
    seen: set[str] = set()
    for state in store.state():
        owner = limit_of(state.key, declared)
        if owner is not None:
            limit, jobs = declared[owner]
            seen.add(owner)
            row = RateRow(owner, state.key, limit.rate, jobs, state.next_at_ms, state.reserved)
        else:  # a key of a limit no job of this process declares
            row = RateRow(state.key, state.key, None, (), state.next_at_ms, state.reserved)
        rows.append(row)
    for name, (limit, jobs) in declared.items():
        if name not in seen:
            rows.append(RateRow(limit=name, key=None, rate=limit.rate, jobs=jobs, next_at_ms=None, reserved=0))
    return sorted(rows, key=lambda r: (r.limit, r.key or ""))
