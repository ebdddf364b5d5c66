"""The outbox, for an operator: what waits to publish, which rows a permanent error set aside, and
retrying or removing those — what ``manage.py jobs outbox`` and the admin's outbox page call.

A row is set aside when publishing it failed with an error no retry can fix (the database refused its
data); the relay goes on with the rows behind it. Fix the cause (or deploy the code that can publish
it) and retry the row — it keeps its place, ahead of later rows — or remove it for good.

>>> from ultimate_jobs import operator
>>> view = operator.inspect_outbox()
>>> view.failed, [row.error for row in view.rows]
>>> operator.retry_outbox_rows([view.rows[0].id])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..contracts.operator import DEFAULT_JOB_PAGE
from ..contracts.outbox import FailedOutboxRow, OutboxStore
from ..errors import JobArgumentInvalidError
from ..guards.org_boundary import refuse_fleet_view
from ..outbox.boot import outbox_store
from .arguments import check_job_id

OutboxActionName = Literal["retry", "remove"]
MAX_OUTBOX_ROWS = 1_000
"""The most set-aside rows one listing shows (they are listed oldest first)."""


@dataclass(frozen=True, slots=True)
class OutboxView:
    """The outbox at a glance: rows waiting to publish, rows set aside, the oldest waiting row's stage
    instant, and the set-aside rows themselves (oldest first, up to the listing's limit)."""

    pending: int
    failed: int
    oldest_pending_ms: int | None
    rows: tuple[FailedOutboxRow, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "pending": self.pending,
            "failed": self.failed,
            "oldest_pending_ms": self.oldest_pending_ms,
            "rows": [dataclasses.asdict(row) for row in self.rows],
        }


@dataclass(frozen=True, slots=True)
class OutboxActionResult:
    """What a retry or a removal did: the ids it was given, those it acted on, and those it did not
    (not set aside — pending, published or gone)."""

    action: OutboxActionName
    landed: tuple[str, ...]
    missed: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "landed": list(self.landed), "missed": list(self.missed)}


def inspect_outbox(*, limit: int = DEFAULT_JOB_PAGE, store: OutboxStore | None = None) -> OutboxView:
    """Pending and set-aside counts, and the set-aside rows, oldest first (``limit`` of 1 to 1,000)."""
    refuse_fleet_view("inspect_outbox")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_OUTBOX_ROWS:
        raise JobArgumentInvalidError(
            f"limit={limit!r}: list between 1 and {MAX_OUTBOX_ROWS} set-aside rows at a time",
            {"field": "limit"},
        )
    chosen = store or outbox_store()
    stats = chosen.stats()
    rows = tuple(chosen.failed(limit=limit))
    return OutboxView(stats.pending, stats.failed, stats.oldest_pending_ms, rows)


def retry_outbox_rows(ids: Sequence[str], *, store: OutboxStore | None = None) -> OutboxActionResult:
    """Put set-aside rows back in line to publish (they keep their place, ahead of later rows)."""
    refuse_fleet_view("retry_outbox_rows")
    wanted = _ids(ids)
    landed = (store or outbox_store()).retry_failed(wanted)
    return _result("retry", wanted, landed)


def remove_outbox_rows(ids: Sequence[str], *, store: OutboxStore | None = None) -> OutboxActionResult:
    """Delete set-aside rows for good: their jobs will never exist. Pending or published rows are kept."""
    refuse_fleet_view("remove_outbox_rows")
    wanted = _ids(ids)
    landed = (store or outbox_store()).remove_failed(wanted)
    return _result("remove", wanted, landed)


def _ids(ids: Sequence[str]) -> list[str]:
    if isinstance(ids, str) or not ids:
        raise JobArgumentInvalidError(
            "name the set-aside rows by id (manage.py jobs outbox lists them)", {"field": "ids"}
        )
    if len(ids) > MAX_OUTBOX_ROWS:
        raise JobArgumentInvalidError(
            f"{len(ids)} ids at once; act on at most {MAX_OUTBOX_ROWS} rows per call", {"field": "ids"}
        )
    return list(dict.fromkeys(check_job_id(i) for i in ids))


def _result(action: OutboxActionName, wanted: list[str], landed: frozenset[str]) -> OutboxActionResult:
    return OutboxActionResult(
        action, tuple(i for i in wanted if i in landed), tuple(i for i in wanted if i not in landed)
    )
