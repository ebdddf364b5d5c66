"""Values between the driver's records and SQLite's columns, as Django's SQLite backend stores them.

The tables are the models' (one set of migrations for every database), so the driver writes what the ORM
writes: an instant is UTC text ``YYYY-MM-DD HH:MM:SS.ffffff`` (fixed width, so text order is time order),
a uuid is 32 lowercase hex digits, JSON is its text. Statements take and answer these; the conversions
to epoch ms, dashed ids and Python values happen here, once; the decoders are the shared ones of
:mod:`..sql.rows`.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from ..sql.dialect import Dialect, dumps, loads

__all__ = ["SQLITE", "dashed", "dashed_or_none", "dumps", "hex_id", "loads", "ms", "ms_or_none", "ts", "ts_or_none"]

EPOCH = datetime(1970, 1, 1)
ONE_MS = timedelta(milliseconds=1)


def ts(ms: int) -> str:
    """Epoch ms as the column text of an instant."""
    return (EPOCH + timedelta(milliseconds=ms)).isoformat(" ", "microseconds")


def ts_or_none(ms: int | None) -> str | None:
    return None if ms is None else ts(ms)


def ms(value: Any) -> int:
    """An instant column (text, or the datetime Django's converter made of it) as epoch ms."""
    if not isinstance(value, datetime):
        value = datetime.fromisoformat(value)
    offset = value.utcoffset()
    if offset is not None:
        value = value.replace(tzinfo=None) - offset
    return int((value - EPOCH) // ONE_MS)


def ms_or_none(value: Any) -> int | None:
    return None if value is None else ms(value)


def hex_id(value: str) -> str | None:
    """A job id (any spelling ``uuid.UUID`` reads) as its column text, or ``None`` when it names no row."""
    try:
        return uuid.UUID(value).hex
    except (ValueError, TypeError, AttributeError):
        return None


def dashed(value: str) -> str:
    """A uuid column's text as the canonical dashed id the records hold."""
    if len(value) != 32:
        return str(uuid.UUID(value))
    return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"


def dashed_or_none(value: str | None) -> str | None:
    return None if value is None else dashed(value)


SQLITE = Dialect(name="sqlite", uid=dashed, uid_param=hex_id, instant=ms, at=ts, json=loads)
"""Ids as 32 hex digits, instants as fixed-width UTC text, JSON as its text."""
