"""One duration parser for every declaration: ``'3d'``, ``'10s'``, ``'250ms'``, ``timedelta`` or int ms."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from fractions import Fraction

from ..errors import InvariantError

Duration = int | str | timedelta
"""What a duration field accepts: int milliseconds, ``'250ms'``/``'10s'``/``'5m'``/``'2h'``/``'3d'``/``'1w'``,
or a timedelta."""

_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
MAX_DURATION_DIGITS = 40
"""The most digits a duration's text may carry (Python refuses to read an int of over 4,300)."""
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")


def parse_duration(value: object, *, field: str = "duration") -> int:
    """Milliseconds for ``value``; anything else is ``X_INVARIANT`` naming ``field``.

    >>> parse_duration("3d"), parse_duration("250ms"), parse_duration(timedelta(seconds=2))
    (259200000, 250, 2000)
    """
    if isinstance(value, bool):
        raise InvariantError(
            f"{field}: {value!r} is not a duration; write '10s', '250ms' or an int of ms", {"field": field}
        )
    if isinstance(value, timedelta):
        # integer arithmetic: total_seconds() * 1000 is a float, and timedelta(milliseconds=1001) became 1000
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros % 1000:
            raise InvariantError(f"{field}: {value!r} is not a whole number of milliseconds", {"field": field})
        return micros // 1000
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise InvariantError(f"{field}: {value!r} is not a whole number of milliseconds", {"field": field})
        return int(value)
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise InvariantError(
                f"{field}: {value!r} is not a duration; write e.g. '250ms', '10s', '5m', '2h', '3d'",
                {"field": field, "value": value},
            )
        if len(match.group(1)) > MAX_DURATION_DIGITS:
            raise InvariantError(
                f"{field}: {value[:40]!r}… has more than {MAX_DURATION_DIGITS} digits; no duration is that long",
                {"field": field},
            )
        ms = Fraction(match.group(1)) * _UNITS[match.group(2)]  # exact: float('1.001') * 1000 is 1000.999…
        if ms.denominator != 1:
            raise InvariantError(f"{field}: {value!r} is not a whole number of milliseconds", {"field": field})
        return int(ms)
    raise InvariantError(f"{field}: {type(value).__name__} is not a duration", {"field": field})


def format_duration(ms: int) -> str:
    """The shortest exact spelling of ``ms`` (``259200000`` → ``'3d'``), used to name a sleep step."""
    for unit in ("w", "d", "h", "m", "s"):
        size = _UNITS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
