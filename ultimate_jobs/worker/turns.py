"""A fair queue's claim-ahead buffer: claimed jobs waiting for a slot, kept by lane (the org) and handed out in
turn, as the fair claim hands out rows — an org whose one job arrived behind forty of a busy org's waits
for one of them, not forty."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


def round_by_round(items: Sequence[T], lane: Callable[[T], str | None]) -> list[T]:
    """``items`` (one claim's rows, in the driver's order) with each lane's first ahead of any lane's second,
    and so on, in order within a lane — the order the fair claim handed them out in, so a quiet org's row is
    dispatched second, not after the busy org's share. Items whose ``lane`` is ``None`` (a queue that is not
    fair) keep their place in the first round."""
    seen: dict[str | None, int] = {}
    rounds: list[tuple[int, int]] = []
    for index, item in enumerate(items):
        key = lane(item)
        taken = seen.get(key, 0) if key is not None else 0
        if key is not None:
            seen[key] = taken + 1
        rounds.append((taken, index))
    return [items[index] for _, index in sorted(rounds)]


class TurnQueue(Generic[T]):
    """The part of ``collections.deque`` a buffer uses (``append``, ``popleft``, ``appendleft``, ``len``,
    iteration, ``clear``), in lane turn: :meth:`popleft` takes the first lane's first item, and a lane with
    more goes last, behind every other lane waiting — round by round, in order within one lane."""

    def __init__(self, lane: Callable[[T], str]) -> None:
        self._lane = lane
        self._lanes: OrderedDict[str, deque[T]] = OrderedDict()  # the lane whose turn is next first
        self._size = 0

    def append(self, item: T) -> None:
        """Queue ``item`` at the end of its lane; a lane that was not waiting joins last."""
        self._lanes.setdefault(self._lane(item), deque()).append(item)
        self._size += 1

    def appendleft(self, item: T) -> None:
        """Put ``item`` back first: its lane's turn is next, and it is that lane's first."""
        lane = self._lane(item)
        self._lanes.setdefault(lane, deque()).appendleft(item)
        self._lanes.move_to_end(lane, last=False)
        self._size += 1

    def popleft(self) -> T:
        """The next item in turn; ``IndexError`` when none waits (as ``deque.popleft``)."""
        if not self._lanes:
            raise IndexError("pop from an empty TurnQueue")
        lane, items = next(iter(self._lanes.items()))
        item = items.popleft()
        if items:
            self._lanes.move_to_end(lane)
        else:
            del self._lanes[lane]
        self._size -= 1
        return item

    def clear(self) -> None:
        """Drop every item."""
        self._lanes.clear()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[T]:
        """Every waiting item, lane by lane (not in turn order)."""
        for items in self._lanes.values():
            yield from items
