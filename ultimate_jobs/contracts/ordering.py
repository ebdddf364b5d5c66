"""How a job list is sorted and paged, and how many rows it matches — shared by every driver.

A list is sorted by one column (:data:`JOB_ORDERS`), ascending, or descending with a leading ``-``
(``"-created"``, newest first, is the default). Rows that tie on the column follow in the same
direction by creation, then by id, so every order is total and a page boundary is exact. Sorted by
``finished``, a list holds finished rows only: a live row has no finish to sort by. Text (a job name,
a queue) sorts by code point on every driver.

Each order is an index walk on every driver — ``x_jobs_created_idx`` and, for the others, one index of
``(column, created_at, id)`` (``x_jobs_finished_idx`` holds finished rows only) — so a page reads the rows
it shows, however many finished rows the table holds.

A page is reached by a cursor (:func:`job_cursor`): the sort column's value, the creation instant and the
id of a row, with the order it belongs to. A cursor of one order is refused by a list of another.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from ..core.clock import MAX_INSTANT_MS, MIN_INSTANT_MS

JobOrder = Literal[
    "created",
    "-created",
    "run_at",
    "-run_at",
    "finished",
    "-finished",
    "attempts",
    "-attempts",
    "name",
    "-name",
    "queue",
    "-queue",
]
JOB_ORDERS: tuple[JobOrder, ...] = get_args(JobOrder)
DEFAULT_JOB_ORDER: JobOrder = "-created"
ORDER_COLUMNS = ("created", "run_at", "finished", "attempts", "name", "queue")
TEXT_COLUMNS = frozenset({"name", "queue"})
COUNT_CAP = 10_000
"""The most rows a count reads: a filter matching more is answered with an estimate (or as a bound)."""

CountBasis = Literal["count", "planner", "sample", "bound"]

SortValue = int | str | None
SortKey = tuple[int | str, int, str] | tuple[int, str]


class SortableRow(Protocol):
    """What a row is sorted by: a ``JobRecord``, or a driver's own row with the same fields."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def run_at_ms(self) -> int: ...
    @property
    def created_at_ms(self) -> int: ...
    @property
    def finished_at_ms(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class JobCount:
    """How many rows a list's filter matches. ``rows`` is exact when ``basis`` is ``"count"``; otherwise
    it is an estimate — ``"planner"`` (Postgres's statistics), ``"sample"`` (Redis: a random sample of the
    rows the filter walks, scaled) — or ``"bound"``: more than ``rows`` (counting stopped past
    :data:`COUNT_CAP`). ``rows`` is ``None`` when nothing could estimate it (Redis: a sample that met no
    matching row)."""

    rows: int | None
    basis: CountBasis | None

    @property
    def exact(self) -> bool:
        """Whether :attr:`rows` is the number of rows, not an estimate or a bound."""
        return self.basis == "count"

    def as_dict(self) -> dict[str, object]:
        """``{"rows", "basis", "exact", "text"}`` — the ``--json`` and JSON view shape."""
        return {"rows": self.rows, "basis": self.basis, "exact": self.exact, "text": self.text()}

    def text(self) -> str:
        """How a page says it: ``"1,234"``, ``"about 1,200,000 (estimated from the planner's statistics)"``,
        ``"more than 10,000"``, or ``"not counted (…)"``."""
        if self.rows is None:
            return "not counted (a sample of the rows met none that match: narrow the filters to count exactly)"
        if self.basis == "count":
            return f"{self.rows:,}"
        if self.basis == "bound":
            return f"more than {self.rows:,}"
        source = "the planner's statistics" if self.basis == "planner" else "a sample of the rows"
        return f"about {self.rows:,} (estimated from {source})"


def check_order(order: object) -> JobOrder:
    """``order`` when it is one of :data:`JOB_ORDERS`, else ``X_JOB_PAGE_INVALID``."""
    from ..errors import JobPageInvalidError

    if isinstance(order, str) and order in JOB_ORDERS:
        return order
    shown = repr(order)[:60]
    raise JobPageInvalidError(
        f"order {shown} is not a sort of the job list; pass one of {', '.join(JOB_ORDERS)} "
        "(a leading '-' sorts descending)",
        {"order": shown, "known": list(JOB_ORDERS)},
    )


def order_parts(order: JobOrder) -> tuple[str, bool]:
    """``(column, descending)`` of an order: ``"-run_at"`` is ``("run_at", True)``."""
    return (order[1:], True) if order.startswith("-") else (order, False)


def opposite(order: JobOrder) -> JobOrder:
    """The same column the other way: ``"-run_at"`` for ``"run_at"`` (a page before a cursor walks it)."""
    flipped = order[1:] if order.startswith("-") else f"-{order}"
    return check_order(flipped)


def sort_value(row: SortableRow, column: str) -> SortValue:
    """The value ``row`` sorts by in ``column`` (``None`` for ``created``: its instant is the tie-break)."""
    if column == "created":
        return None
    if column == "run_at":
        return row.run_at_ms
    if column == "finished":
        return row.finished_at_ms
    if column == "attempts":
        return row.attempts
    value: str = getattr(row, column)
    return value


def sort_key(row: SortableRow, column: str) -> SortKey:
    """The tuple rows are ordered by, ascending: ``(value, created_at_ms, id)`` (``(created_at_ms, id)``
    sorted by creation). Text compares by code point, as every driver orders it."""
    value = sort_value(row, column)
    if column == "created":
        return (row.created_at_ms, row.id)
    assert value is not None  # a finished-ordered list holds finished rows only
    return (value, row.created_at_ms, row.id)


def job_cursor(row: SortableRow, order: JobOrder = DEFAULT_JOB_ORDER) -> str:
    """The cursor of a row in a list sorted by ``order``: ``filter.after = job_cursor(last_row, order)``
    pages on, ``before = job_cursor(first_row, order)`` back."""
    column, _ = order_parts(order)
    body: dict[str, object] = {"c": row.created_at_ms, "i": row.id}
    if order != DEFAULT_JOB_ORDER:
        body = {"o": order, "v": sort_value(row, column), **body}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return "jc1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class Cursor:
    """A decoded cursor: the sort column's value (``None`` sorted by creation), the row's creation
    instant and its id."""

    value: SortValue
    created_at_ms: int
    id: str

    def key(self, column: str) -> SortKey:
        """The cursor as a :func:`sort_key`."""
        if column == "created":
            return (self.created_at_ms, self.id)
        assert self.value is not None
        return (self.value, self.created_at_ms, self.id)


def decode_cursor(cursor: str, *, which: str, order: JobOrder = DEFAULT_JOB_ORDER) -> Cursor:
    """The :class:`Cursor` :func:`job_cursor` encoded for ``order``; anything else — text no page produced,
    or a cursor of a list sorted another way — is ``X_JOB_PAGE_INVALID``."""
    from ..errors import JobPageInvalidError

    try:
        if not cursor.startswith("jc1."):
            raise ValueError("prefix")
        body = cursor[4:]
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        created, job_id = data["c"], data["i"]
        if isinstance(created, bool) or not isinstance(created, int) or not isinstance(job_id, str):
            raise ValueError("shape")
        if not MIN_INSTANT_MS <= created <= MAX_INSTANT_MS:
            raise ValueError("instant")
        found = data.get("o", DEFAULT_JOB_ORDER)
        value = data.get("v")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise JobPageInvalidError(
            f"filter.{which} is not a cursor a page produced; pass job_cursor(row) of a row from the previous page. "
            "Fix: python manage.py jobs list --limit 200 --json",
            {"cursor": which},
        ) from exc
    if found != order:
        raise JobPageInvalidError(
            f"filter.{which} is a cursor of a list sorted by {str(found)[:20]!r}, not {order!r}; page with the "
            "order the cursor came from, or start again from the first page",
            {"cursor": which, "order": order},
        )
    column, _ = order_parts(order)
    if not _value_fits(column, value):
        raise JobPageInvalidError(
            f"filter.{which} is not a cursor a page produced; pass job_cursor(row) of a row from the previous page",
            {"cursor": which},
        )
    return Cursor(value=value, created_at_ms=created, id=job_id)


def _value_fits(column: str, value: object) -> bool:
    """Whether a cursor's value is of the column's kind: none for ``created``, text for a name or a queue,
    an int (an instant in range, or a count of attempts) for the rest."""

    if column == "created":
        return value is None
    if column in TEXT_COLUMNS:
        return isinstance(value, str) and len(value) <= 500 and "\x00" not in value
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    if column == "attempts":
        return 0 <= value < 2**31
    return MIN_INSTANT_MS <= value <= MAX_INSTANT_MS


def after_cursor(key: SortKey, cursor: SortKey, *, descending: bool) -> bool:
    """Whether a row with sort ``key`` comes after the cursor in the list's direction."""
    return key < cursor if descending else key > cursor
