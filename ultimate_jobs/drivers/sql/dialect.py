"""What makes one SQL backend differ from the other, besides its statements: how ids, instants and JSON
travel between the records and the columns."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Dialect:
    """The codecs of one SQL backend. Each is a plain function, so a decoder pays one call per value.

    >>> from ultimate_jobs.drivers.postgres.rows import POSTGRES
    >>> POSTGRES.at(1_000)  # an instant parameter: Postgres statements take epoch ms
    1000
    """

    name: str
    uid: Callable[[Any], str]
    """An id column as the canonical dashed text the records hold."""
    uid_param: Callable[[Any], str | None]
    """An id (any spelling ``uuid.UUID`` reads) as the column's parameter; ``None`` when it names no row."""
    instant: Callable[[Any], int]
    """An instant column as epoch ms."""
    at: Callable[[int], Any]
    """Epoch ms as an instant parameter."""
    json: Callable[[Any], Any]
    """A JSON column as Python."""

    def instant_or_none(self, value: Any) -> int | None:
        """:attr:`instant`, passing ``None`` through."""
        return None if value is None else self.instant(value)

    def at_or_none(self, ms: int | None) -> Any:
        """:attr:`at`, passing ``None`` through."""
        return None if ms is None else self.at(ms)


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""One encoder for every parameter: ``json.dumps`` with any option but the defaults builds a new one per call,
which cost more than encoding a small row."""


def dumps(value: Any) -> str:
    """A value as a JSON parameter's text (Postgres binds it as ``%(x)s::jsonb``)."""
    return _ENCODER.encode(value)


def loads(value: Any) -> Any:
    """A JSON column as Python: both backends hand raw statements JSON as text (``None`` stays ``None``)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def canonical_id(value: str) -> str:
    """An id as a uuid prints (lower case, hyphenated); a value that is no uuid as it is."""
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return value
