"""The Postgres dialect: how ids, instants and JSON travel between the records and Postgres's columns, and
the request rows every statement that inserts jobs reads.

Statements take and answer instants as epoch ms (``to_timestamp(%(now)s / 1000.0)`` in, ``extract(epoch
…)`` out) and uuids as text, so the codecs are nearly the identity; the decoders are the shared ones of
:mod:`..sql.rows`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

from ...contracts.jobs import EnqueueRequest, lane_of
from ...core.ids import new_ids
from ..sql.dialect import Dialect, canonical_id, loads

__all__ = ["POSTGRES", "canonical_id", "enqueue_rows", "is_uuid", "needs_transaction", "uuid_or_none"]


def uuid_or_none(value: Any) -> str | None:
    """``value`` as a canonical uuid text, or ``None`` when it cannot name a row (ids are UUIDs)."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return None


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A uuid as Postgres prints it — what every claimed id is — matched without building a ``uuid.UUID``."""


def is_uuid(value: str) -> bool:
    """Whether ``value`` can name a row of ``x_jobs`` (ids are UUIDs); anything else names none."""
    if type(value) is str and _CANONICAL_UUID.fullmatch(value) is not None:
        return True
    return uuid_or_none(value) is not None


POSTGRES = Dialect(name="postgres", uid=str, uid_param=uuid_or_none, instant=int, at=int, json=loads)
"""Ids as uuid text, instants as epoch ms both ways, JSON as its text (Django hands raw statements jsonb
as text)."""


def enqueue_rows(requests: Sequence[EnqueueRequest], fair_queues: frozenset[str]) -> list[dict[str, Any]]:
    """The request rows ENQUEUE_RECORDSET reads, in order, ids minted here when the caller named none; a
    row of one of ``fair_queues`` carries its lane (:func:`lane_of`). A column that is NULL is left out of
    its row (``jsonb_to_recordset`` reads a missing key as NULL): less JSON to write and to parse."""
    minted = iter(new_ids(2 * len(requests)))  # one batch of ids: a caller's own (an outbox replay) are kept
    rows = []
    for i, r in enumerate(requests):
        row = {
            "ord": i,
            "id": r.id or next(minted),
            "run_id": r.run_id or next(minted),
            "name": r.name,
            "queue": r.queue,
            "idempotency_key": r.idempotency_key,
            "input": r.input if type(r.input) is dict else dict(r.input),
            "max_attempts": r.max_attempts,
            "priority": r.priority,
        }
        for column in _NULLABLE:
            value = getattr(r, column)
            if value is not None:
                row[column] = value
        lane = lane_of(r, fair_queues)
        if lane is not None:
            row["lane"] = lane
        rows.append(row)
    return rows


_NULLABLE = ("tenant_id", "run_at_ms", "enqueued_by", "traceparent", "concurrency_key")
"""The request's columns a row carries only when set."""


def needs_transaction(requests: Sequence[EnqueueRequest]) -> bool:
    """Whether a batch must run in a transaction of its own: a member may be refused (on_conflict="error",
    or a caller's id that may name another tenant's row), and then no row of the batch may stay."""
    return len(requests) > 1 and any(r.on_conflict == "error" or r.id is not None for r in requests)
