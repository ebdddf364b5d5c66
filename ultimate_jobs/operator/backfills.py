"""The operator surface over the backfill ledger: :func:`inspect_backfills`, the one projection every
surface (the CLI, the admin, the JSON views) reads, so none of them can report a different number."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..contracts.operator import MAX_JOB_PAGE
from ..contracts.protocol import BackfillStore, JobDriver
from ..contracts.schedules import BACKFILL_STATUSES, BackfillRun, BackfillStatus
from ..errors import JobArgumentInvalidError, NotImplementedOnDriverError
from ..features.backfills import registered_backfills
from ..guards.org_boundary import refuse_fleet_view
from ._support import resolve
from .arguments import check_name, shown

DEFAULT_BACKFILL_LIMIT = 100


@dataclass(frozen=True, slots=True)
class BackfillRow:
    """One pass as every surface shows it: the ledger row, and whether this process still declares it."""

    run: BackfillRun
    declared: bool

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``)."""
        return {**self.run.as_dict(), "declared": self.declared}


def inspect_backfills(
    *,
    name: str | None = None,
    status: str | None = None,
    limit: int = DEFAULT_BACKFILL_LIMIT,
    driver: JobDriver | None = None,
) -> list[BackfillRow]:
    """The ledger, newest pass first, of one ``name`` and/or ``status`` (running, completed, failed) when
    given, at most ``limit`` rows (1 to 200).

    >>> [(r.run.name, r.run.status, r.run.rows_processed) for r in inspect_backfills(status="running")]

    A malformed name, status or limit is ``X_JOB_ARGUMENT_INVALID``; a driver without a ledger is
    ``X_NOT_IMPLEMENTED``.
    """
    refuse_fleet_view("inspect_backfills")
    active = resolve(driver)
    store: BackfillStore | None = active.backfills
    if store is None:
        raise NotImplementedOnDriverError(
            f"the backfill ledger needs driver.backfills, and the {active.name!r} driver has none. "
            "Fix: give the driver a backfills store, or run it against one of the built-in drivers "
            "(postgres, sqlite, redis, memory)",
            {"driver": active.name, "capability": "backfills"},
        )
    checked_name = check_name(name, what="backfill") if name is not None else None
    checked_status = _check_status(status) if status is not None else None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_JOB_PAGE:
        raise JobArgumentInvalidError(
            f"limit {limit!r} is out of range; ask for 1 to {MAX_JOB_PAGE} rows", {"limit": shown(str(limit))}
        )
    declared = {d.name for d in registered_backfills()}
    rows = store.list(name=checked_name, status=checked_status, limit=limit)
    return [BackfillRow(run=r, declared=r.name in declared) for r in rows]


def _check_status(value: object) -> BackfillStatus:
    for status in BACKFILL_STATUSES:
        if value == status:
            return status
    raise JobArgumentInvalidError(
        f"{shown(value)} is not a backfill status; use one of {', '.join(BACKFILL_STATUSES)}",
        {"value": shown(value)},
    )
