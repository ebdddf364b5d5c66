"""The job lists' sortable column headers: each column an operator sorts by links to the list sorted by it
(the ``order`` parameter ``operator.list_jobs`` takes), drawn in the markup of Django's own sortable
headers (``th.sortable``, ``sorted ascending``, ``div.sortoptions``) so the running Django version's CSS
styles them.

A click on a column not sorted by sorts it the way an operator first wants it — text A to Z, instants and
attempts largest first; a click on the sorted one turns it around. A new sort starts at its first page (the
cursors belong to the old order).

>>> sort_headers(query, (Column("job", sorts=(("job", "name"),)), Column("state", "state")))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..contracts.ordering import DEFAULT_JOB_ORDER, JobOrder, check_order, order_parts
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
    """One column of a job list: its cell's CSS name and its header — text, and the parts of it that sort:
    ``(label, column)`` pairs, each a link of its own (one column's cell can stack several values, as the
    *when* column stacks created, run at and finished)."""

    css: str
    label: str = ""
    sorts: tuple[tuple[str, str], ...] = ()


def sort_headers(query: ListQuery, columns: tuple[Column, ...]) -> list[dict[str, Any]]:
    """Each column's header as the list template draws it: ``css``, ``label`` (the text that does not
    sort), ``links`` — for each sorting part its ``label``, the ``url`` a click follows and ``sorted``
    (``"ascending"``/``"descending"``/``None``) — and the column's ``sorted`` and ``clear_url`` (back to the
    default order, newest first) when one of its parts is the sort and the order is not the default."""
    current, descending = order_parts(query.order)
    direction = "descending" if descending else "ascending"
    headers: list[dict[str, Any]] = []
    for column in columns:
        links = []
        for label, sorts in column.sorts:
            is_sorted = sorts == current
            if is_sorted:
                turned = sorts if descending else f"-{sorts}"
            else:
                turned = f"-{sorts}" if sorts in FIRST_DESCENDING else sorts
            links.append(
                {
                    "label": label,
                    "url": _order_url(query, check_order(turned)),
                    "sorted": direction if is_sorted else None,
                }
            )
        sorted_here = next((link for link in links if link["sorted"]), None)
        moved = sorted_here is not None and query.order != DEFAULT_JOB_ORDER
        headers.append(
            {
                "css": column.css,
                "label": column.label,
                "links": links,
                "sorted": sorted_here["sorted"] if sorted_here else None,
                "toggle_url": sorted_here["url"] if sorted_here else None,
                "clear_url": _order_url(query, DEFAULT_JOB_ORDER) if moved else None,
            }
        )
    return headers


def _order_url(query: ListQuery, order: JobOrder) -> str:
    """This page's query string sorted by ``order`` (none for the default), from its first page."""
    return query.url(**{ORDER: None if order == DEFAULT_JOB_ORDER else order})
