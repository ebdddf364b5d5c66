"""The job lists' sortable column headers: each column an operator sorts by links to the list sorted by it
(the ``order`` parameter ``operator.list_jobs`` takes), drawn in the markup of Django's own sortable
headers (``th.sortable``, ``sorted ascending``, ``div.sortoptions``) so the running Django version's CSS
styles them.

A click on a column not sorted by sorts it the way an operator first wants it — text A to Z, instants and
attempts largest first; a click on the sorted one turns it around. A new sort starts at its first page (the
cursors belong to the old order).

>>> sort_headers(query, (Column("job", "name"), Column("state")))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..drivers.ordering import DEFAULT_JOB_ORDER, JobOrder, check_order, order_parts
from .filters import ORDER, ListQuery

ORDER_TEXT: dict[JobOrder, str] = {
    "-created": "newest first",
    "created": "oldest first",
    "-run_at": "latest run time first",
    "run_at": "earliest run time first",
    "-finished": "finished jobs, latest finish first",
    "finished": "finished jobs, earliest finish first",
    "-attempts": "most attempts first",
    "attempts": "fewest attempts first",
    "-name": "by job name, Z to A",
    "name": "by job name, A to Z",
    "-queue": "by queue, Z to A",
    "queue": "by queue, A to Z",
}
"""How a page says its order."""

FIRST_DESCENDING = frozenset({"created", "run_at", "finished", "attempts"})
"""The columns a first click sorts largest first."""


@dataclass(frozen=True)
class Column:
    """One column of a job list: its header, its cell's CSS name, and the column it sorts by (``None``:
    not sortable)."""

    label: str
    css: str
    sorts: str | None = None


def sort_headers(query: ListQuery, columns: tuple[Column, ...]) -> list[dict[str, Any]]:
    """Each column's header as the list template draws it: ``label``, ``css``, and for a sortable one the
    ``url`` a click follows, ``sorted`` (``"ascending"``/``"descending"``/``None``), and ``clear_url`` (back
    to the default order, newest first) when it is the sorted one and the order is not the default."""
    current, descending = order_parts(query.order)
    headers: list[dict[str, Any]] = []
    for column in columns:
        header: dict[str, Any] = {"label": column.label, "css": column.css, "sorts": column.sorts}
        if column.sorts is not None:
            is_sorted = column.sorts == current
            if is_sorted:
                turned = column.sorts if descending else f"-{column.sorts}"
            else:
                turned = f"-{column.sorts}" if column.sorts in FIRST_DESCENDING else column.sorts
            header["url"] = _order_url(query, check_order(turned))
            header["sorted"] = ("descending" if descending else "ascending") if is_sorted else None
            moved = is_sorted and query.order != DEFAULT_JOB_ORDER
            header["clear_url"] = _order_url(query, DEFAULT_JOB_ORDER) if moved else None
        headers.append(header)
    return headers


def _order_url(query: ListQuery, order: JobOrder) -> str:
    """This page's query string sorted by ``order`` (none for the default), from its first page."""
    return query.url(**{ORDER: None if order == DEFAULT_JOB_ORDER else order})
