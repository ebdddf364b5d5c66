"""What the drivers that pick a fair queue's lanes in Python share (memory, SQLite): which lanes one claim
serves, how many rows each gives, the order they are handed out in, and where each lane goes after.

The rules (the conformance suite's :mod:`~ultimate_jobs.testing.conformance_fairness`): at most ``cap`` lanes
whose turn is oldest — a lane waking now counts its wake time as its turn, and goes first on a tie — each
giving at most its share (:func:`share_of`) of its due rows, handed out round by round (each lane's first,
then each one's second, …), so the lanes fill the batch between them. After the claim, the lanes it
served take their turn now, the woken lanes it did not serve join the rotation at their wake time, and
the lanes that had nothing due leave it until their next row is due.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Row = TypeVar("Row")


def lanes_to_serve(active: Sequence[tuple[Any, str]], waking: Sequence[tuple[Any, str]], cap: int) -> list[str]:
    """The at most ``cap`` lanes a claim serves, from the active lanes' ``(turn, lane)`` and the waking
    lanes' ``(wake time, lane)`` (each at most ``cap``, oldest first), oldest turn first."""
    merged = sorted([(at, 1, lane) for at, lane in active] + [(at, 0, lane) for at, lane in waking])
    return [lane for *_, lane in merged[:cap]]


def share_of(cap: int, lanes: Sequence[str]) -> int:
    """How many due rows each of ``lanes`` may give a claim of ``cap``: ``cap`` over the lanes, rounded up, or
    enough to fill the batch beside one row of each other lane, whichever is more — handed out round by
    round, the lanes fill the batch (an org with one job waiting takes one slot, the busy org the rest)."""
    return max(-(-cap // len(lanes)), cap - len(lanes) + 1) if lanes else 0


@dataclass(frozen=True, slots=True)
class LanePick(Generic[Row]):
    """One fair queue's part of a claim: the ``lanes`` served, the ``waking`` lanes looked at, and each
    served lane's due ``rows`` (at most its share, in claim order)."""

    lanes: list[str]
    waking: list[str]
    rows: dict[str, list[Row]]

    @property
    def first(self) -> list[Row]:
        """The lanes' rows in the order the claim hands them out: round by round."""
        share = max((len(rows) for rows in self.rows.values()), default=0)
        return [rows[n] for n in range(share) for lane in self.lanes if n < len(rows := self.rows[lane])]

    def moves(self, taken: Callable[[Row], bool]) -> tuple[list[str], list[str], list[str]]:
        """After the claim took the rows ``taken`` answers true for: the lanes served, the woken lanes not
        served (to join the rotation at their wake time) and the lanes retired (they had nothing due)."""
        served = [lane for lane in self.lanes if any(taken(row) for row in self.rows[lane])]
        retired = [lane for lane in self.lanes if not self.rows[lane]]
        woken = [lane for lane in self.waking if lane not in served and lane not in retired]
        return served, woken, retired
