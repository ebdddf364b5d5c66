"""The Postgres driver's scheduler storage: ``driver.leader`` (lease rows in ``x_job_scheduler_leases``)
and ``driver.scheduler_state`` (``x_job_task_watermarks`` and the one-statement fire), over the
``SQL_*`` statements of :mod:`.queries.scheduler` on the driver's own executor — so a fire's job rows land
in the same statement as its watermark, and the leader's rollup in the same statement as its renewal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..base import Fire, FireResult, LeaderLease
from .executor import jsonb
from .queries import scheduler as sql
from .rows import enqueue_rows

if TYPE_CHECKING:
    from .driver import PostgresDriver


class PostgresLeaderStore:
    """``driver.leader`` for the Postgres driver: a lease is a row with an expiry, not
    ``pg_try_advisory_lock`` — an advisory lock belongs to a session, and the driver's statements run on
    pooled connections, so the lock would go with the connection and every node would read itself as
    leader."""

    durable = True

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver

    def acquire(self, name: str, holder: str, *, ttl_ms: int, now_ms: int, rollup: bool = False) -> LeaderLease | None:
        params = {"name": name, "holder": holder, "now": now_ms, "ttl": ttl_ms}
        rows = self._d.executor.query(sql.SQL_LEADER_ACQUIRE_ROLLUP if rollup else sql.SQL_LEADER_ACQUIRE, params)
        return _lease(rows[0]) if rows else None

    def release(self, name: str, holder: str) -> bool:
        return bool(self._d.executor.query(sql.SQL_LEADER_RELEASE, {"name": name, "holder": holder}))

    def current(self, name: str) -> LeaderLease | None:
        rows = self._d.executor.query(sql.SQL_LEADER_CURRENT, {"name": name})
        return _lease(rows[0]) if rows else None


def _lease(row: tuple[Any, ...]) -> LeaderLease:
    name, holder, acquired, expires = row[:4]
    return LeaderLease(name=name, holder=holder, acquired_at_ms=int(acquired), expires_at_ms=int(expires))


class PostgresSchedulerStore:
    """``driver.scheduler_state`` for the Postgres driver: the watermarks outlive the process, so a
    redeployed scheduler reads where the one it replaced stopped and catch-up sees the gap."""

    durable = True

    def __init__(self, driver: PostgresDriver) -> None:
        self._d = driver

    def load(self, tasks: Sequence[str], *, now_ms: int) -> dict[str, int]:
        names = list(dict.fromkeys(tasks))
        if not names:
            return {}
        rows = self._d.executor.query(sql.SQL_SCHEDULER_LOAD, {"tasks": names, "now": now_ms})
        found = {row[0]: int(row[1]) for row in rows}
        missing = [name for name in names if name not in found]
        if missing:  # armed by another scheduler after this statement's snapshot was taken
            again = self._d.executor.query(sql.SQL_SCHEDULER_WATERMARKS, {"tasks": missing})
            found.update({row[0]: int(row[1]) for row in again})
        return {name: found[name] for name in tasks}

    def fire(self, fire: Fire) -> FireResult:
        params = {
            "task": fire.task,
            "previous": fire.previous_ms,
            "watermark": fire.watermark_ms,
            "occurrence": fire.occurrence_ms,
            "now": fire.now_ms,
            "rows": jsonb(enqueue_rows(fire.requests)),
        }
        [(moved, paused, inserted, _)] = self._d.executor.query(sql.SQL_SCHEDULER_FIRE, params)
        if moved:
            return FireResult("fired", int(inserted))
        return FireResult("paused" if paused else "fenced")
