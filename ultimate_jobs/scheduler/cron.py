"""The one cron resolver: which instants a ``(cron, tz)`` pair names, in epoch milliseconds.

A cron expression names WALL times in its zone. Each wall time is mapped to every instant that shows
it: none on a spring-forward day (the hour the clocks skip does not exist), two on a fall-back day
(the repeated hour happens twice). So ``0 3 * * *`` in a zone whose clocks move at 03:00 runs zero
times on one switch day and twice on the other — the daylight-saving trap, made exact — while an hourly
cron keeps firing once per real hour across both switches.

croniter walks the naive wall times; this module never hands it an aware datetime, so none of its own
DST guesses apply.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
# How far ahead a clock set back is looked for: no zone has moved its clocks by more than 3 hours.
_FOLD_LOOKAHEAD = timedelta(hours=3)


def to_ms(moment: datetime) -> int:
    """An aware datetime as epoch ms (exact integer arithmetic)."""
    return (moment - EPOCH) // _MS


def from_ms(ms: int, zone: ZoneInfo) -> datetime:
    """Epoch ms as an aware datetime in ``zone`` (its ``fold`` set on a repeated wall time)."""
    return (EPOCH + timedelta(milliseconds=ms)).astimezone(zone)


@lru_cache(maxsize=1)
def _iana() -> frozenset[str]:
    return frozenset(available_timezones())


def load_zone(tz: object) -> ZoneInfo | None:
    """The IANA zone named ``tz``, or ``None`` when the runtime's database has no such key
    (``"Bogota"`` is not a zone; ``"America/Bogota"`` is)."""
    if not isinstance(tz, str) or not tz or tz not in _iana():
        return None
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def cron_problem(expression: object) -> str | None:
    """Why croniter refuses ``expression`` (``None`` when it parses and names at least one instant)."""
    if not isinstance(expression, str) or not expression.strip():
        return "must be a non-empty cron expression such as '0 3 * * *'"
    if not croniter.is_valid(expression):
        return "is not a cron expression croniter can parse (minute hour day-of-month month day-of-week)"
    try:
        croniter(expression, datetime(2000, 1, 1)).get_next(datetime)
    except (CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, ValueError) as exc:
        return f"names no instant ({exc})"
    return None


class CronSchedule:
    """``next_after(ms)``: the first instant strictly after ``ms`` that ``cron`` names in ``zone``.

    >>> CronSchedule("0 3 * * *", ZoneInfo("Europe/Paris")).next_after(0)
    7200000
    """

    __slots__ = ("cron", "zone")

    def __init__(self, cron: str, zone: ZoneInfo) -> None:
        self.cron = cron
        self.zone = zone

    def instants(self, wall: datetime) -> list[int]:
        """Every instant showing the naive wall time ``wall`` in this zone: 0, 1 or 2 of them."""
        found: list[int] = []
        for fold in (0, 1):
            aware = wall.replace(tzinfo=self.zone, fold=fold)
            utc = aware.astimezone(UTC)
            if utc.astimezone(self.zone).replace(tzinfo=None) != wall:
                continue  # a wall time the clocks skipped
            ms = to_ms(utc)
            if ms not in found:
                found.append(ms)
        return found

    def next_after(self, after_ms: int) -> int:
        """The first instant after ``after_ms``. Walks wall times from the wall time of ``after_ms`` —
        from earlier by the size of a clock set back within the next 3 hours, so the repeated hour's
        second pass is seen — and answers the smallest instant past ``after_ms``."""
        local = from_ms(after_ms, self.zone)
        wall = local.replace(tzinfo=None)
        ahead = from_ms(after_ms + _FOLD_LOOKAHEAD // _MS, self.zone)
        drop = (local.utcoffset() or timedelta()) - (ahead.utcoffset() or timedelta())
        walk = croniter(self.cron, wall - drop if drop > timedelta() else wall)
        best: int | None = None
        while True:
            candidate: datetime = walk.get_next(datetime)
            for ms in self.instants(candidate):
                if ms > after_ms and (best is None or ms < best):
                    best = ms
            # Past the starting wall time, the first wall time with an instant has the smallest one.
            if best is not None and candidate > wall:
                return best
