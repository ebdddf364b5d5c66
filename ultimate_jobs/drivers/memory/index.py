"""The memory driver's claim index: the rows a claim may take, found without sorting every row.

Each queue keeps three heaps. ``timed`` holds waiting rows (ready, delayed, suspended) by run time,
``leased`` holds running rows by lease expiry, and ``due`` holds the rows a claim may take — waiting
rows whose run time has come and running rows whose lease lapsed — in claim order: priority
descending, run time, creation time, insertion order. A claim first moves what fell due by now from
``timed`` and ``leased`` into ``due``, then pops only the rows it takes, so draining ``n`` rows costs
``O(n log n)`` in all instead of a sort of every row per claim.

A row is filed again, under a fresh stamp, whenever its state, run time or lease changes; an entry
whose stamp is no longer its row's is stale and is dropped when it surfaces (lazy deletion). When
stale entries outnumber the rows by :data:`REBUILD_SLACK`, the heaps are rebuilt from the rows.

A fair queue's rows (a row with a ``lane``) are also filed in a heap per lane, in claim order, and their
lane in the queue's rotation (:class:`LaneTurn`, the memory form of ``x_job_turns``): filing a waiting row
wakes its lane at the row's run time, as the SQL drivers' trigger does. A fair claim picks the lanes whose
turn is oldest (:meth:`ClaimIndex.turns`), takes each one's due rows (:meth:`ClaimIndex.pop_lane`)
and moves the lanes along (:meth:`ClaimIndex.turn`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from .rows import MemoryRow

WAITING_STATES = frozenset({"ready", "delayed", "suspended"})
REBUILD_SLACK = 1024  # stale entries tolerated beyond one per row before a rebuild

ClaimEntry = tuple[int, int, int, int, int, "MemoryRow"]  # (-priority, run_at, created_at, seq, stamp, row)
TimeEntry = tuple[int, int, "MemoryRow"]  # (run_at or lease_until, stamp, row)
Entry = TypeVar("Entry", ClaimEntry, TimeEntry)


def claim_order(row: MemoryRow) -> tuple[int, int, int, int]:
    """The order claims take rows in: priority descending, run time, creation time, insertion order."""
    return (-row.priority, row.run_at_ms, row.created_at_ms, row.seq)


def claimable(row: MemoryRow, now: int) -> bool:
    """Whether a claim at ``now`` may take ``row``: waiting and due, or running on a lapsed lease."""
    if row.state in WAITING_STATES:
        return row.run_at_ms <= now
    return row.state == "running" and row.lease_until_ms is not None and row.lease_until_ms <= now


@dataclass(slots=True)
class _QueueHeaps:
    due: list[ClaimEntry] = field(default_factory=list)
    timed: list[TimeEntry] = field(default_factory=list)
    leased: list[TimeEntry] = field(default_factory=list)
    lanes: dict[str, list[ClaimEntry]] = field(default_factory=dict)  # a fair queue's waiting rows, per lane


@dataclass(slots=True)
class LaneTurn:
    """One lane of a fair queue: ``turn_at`` when it last took its turn or joined the rotation (``None``
    while it has nothing due), ``wake_at`` when its first waiting row falls due (``None``: it has none)."""

    turn_at: int | None = None
    wake_at: int | None = None


class ClaimIndex:
    """Per-queue heaps over the driver's rows (callers hold the driver lock)."""

    def __init__(self, rows: dict[str, MemoryRow]) -> None:
        self._rows = rows
        self._queues: dict[str, _QueueHeaps] = {}
        self._stamps = itertools.count(1)
        self._size = 0  # entries in every heap, stale ones included
        self._turns: dict[str, dict[str, LaneTurn]] = {}  # queue -> lane -> its turn (outlives a rebuild)

    def file(self, row: MemoryRow) -> None:
        """File ``row`` where its state puts it, staling every entry it had; a finished row is filed nowhere."""
        row.stamp = next(self._stamps)
        if row.state in WAITING_STATES:
            heaps = self._heaps(row.queue)
            self._push(heaps.timed, (row.run_at_ms, row.stamp, row))
            if row.lane is not None:
                self._push(heaps.lanes.setdefault(row.lane, []), (*claim_order(row), row.stamp, row))
                turn = self._turns.setdefault(row.queue, {}).setdefault(row.lane, LaneTurn())
                if turn.turn_at is None:
                    turn.wake_at = row.run_at_ms if turn.wake_at is None else min(turn.wake_at, row.run_at_ms)
        elif row.state == "running" and row.lease_until_ms is not None:
            self._push(self._heaps(row.queue).leased, (row.lease_until_ms, row.stamp, row))
        if self._size > 2 * len(self._rows) + REBUILD_SLACK:
            self.rebuild()

    @staticmethod
    def drop(row: MemoryRow) -> None:
        """Stale every entry of a row leaving the driver (stamps start at 1)."""
        row.stamp = 0

    def rebuild(self) -> None:
        """Refile every row from scratch, shedding the stale entries."""
        self._queues.clear()
        self._size = 0
        for row in self._rows.values():
            self.file(row)

    def fall_due(self, queue: str, now: int) -> list[MemoryRow]:
        """Move ``queue``'s rows that fell due by ``now`` into its claim heap, and answer its running rows
        whose lease lapsed on their final attempt: those are not moved, the caller buries them."""
        heaps = self._queues.get(queue)
        if heaps is None:
            return []
        while heaps.timed and heaps.timed[0][0] <= now:
            _, stamp, row = self._pop(heaps.timed)
            if stamp == row.stamp:
                self._push(heaps.due, (*claim_order(row), stamp, row))
        final: list[MemoryRow] = []
        while heaps.leased and heaps.leased[0][0] <= now:
            _, stamp, row = self._pop(heaps.leased)
            if stamp != row.stamp:
                continue
            if row.attempts >= row.max_attempts:
                final.append(row)
            else:
                self._push(heaps.due, (*claim_order(row), stamp, row))
        return final

    def pop(self, queue: str, now: int, limit: int) -> list[ClaimEntry]:
        """Pop up to ``limit`` of ``queue``'s claimable rows, first in claim order; hand back the ones
        not taken with :meth:`restore`."""
        heaps = self._queues.get(queue)
        taken: list[ClaimEntry] = []
        early: list[MemoryRow] = []  # a wall clock stepped back past their run time or lease
        while heaps is not None and heaps.due and len(taken) < limit:
            entry = self._pop(heaps.due)
            row = entry[-1]
            if entry[-2] != row.stamp:
                continue
            if claimable(row, now):
                taken.append(entry)
            else:
                early.append(row)
        for row in early:  # filed after the loop: a refile may rebuild the heaps under it
            self.file(row)
        return taken

    def restore(self, entries: Iterable[ClaimEntry]) -> None:
        """Put back popped entries a claim did not take."""
        for entry in entries:
            self._push(self._heaps(entry[-1].queue).due, entry)

    # -- fair queues ---------------------------------------------------------------------------

    def turns(self, queue: str, now: int, cap: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """``queue``'s at most ``cap`` active lanes whose turn is oldest, ``(turn, lane)``, and its at most
        ``cap`` lanes waking by ``now`` (their first waiting row fell due), ``(wake time, lane)``."""
        turns = self._turns.get(queue, {})
        active = heapq.nsmallest(cap, ((t.turn_at, lane) for lane, t in turns.items() if t.turn_at is not None))
        waking = heapq.nsmallest(
            cap,
            (
                (t.wake_at, lane)
                for lane, t in turns.items()
                if t.turn_at is None and t.wake_at is not None and t.wake_at <= now
            ),
        )
        return active, waking

    def pop_lane(self, queue: str, lane: str, now: int, limit: int) -> list[ClaimEntry]:
        """Pop up to ``limit`` of the lane's due rows, first in claim order; hand back the ones not taken
        with :meth:`restore_lanes`."""
        heaps = self._queues.get(queue)
        heap = heaps.lanes.get(lane) if heaps is not None else None
        taken: list[ClaimEntry] = []
        early: list[ClaimEntry] = []  # waiting, not due yet (a delayed row of a higher priority)
        while heap and len(taken) < limit:
            entry = self._pop(heap)
            row = entry[-1]
            if entry[-2] != row.stamp or row.state not in WAITING_STATES:
                continue
            (taken if row.run_at_ms <= now else early).append(entry)
        self.restore_lanes(early)
        return taken

    def restore_lanes(self, entries: Iterable[ClaimEntry]) -> None:
        """Put back entries :meth:`pop_lane` popped and a claim did not take."""
        for entry in entries:
            row = entry[-1]
            assert row.lane is not None
            self._push(self._heaps(row.queue).lanes.setdefault(row.lane, []), entry)

    def turn(self, queue: str, now: int, *, served: list[str], woken: list[str], retired: list[str]) -> None:
        """After a fair claim of ``queue``: the lanes it ``served`` took their turn ``now``; the ``woken``
        lanes it did not serve join the rotation at their wake time; the ``retired`` lanes (nothing due)
        are out until their first waiting row's run time."""
        turns = self._turns.get(queue, {})
        for lane in served:
            turns[lane] = LaneTurn(turn_at=now)
        for lane in woken:
            turns[lane] = LaneTurn(turn_at=turns[lane].wake_at)
        for lane in retired:
            turns[lane] = LaneTurn(wake_at=self._next_wake(queue, lane))

    def _next_wake(self, queue: str, lane: str) -> int | None:
        heaps = self._queues.get(queue)
        heap = heaps.lanes.get(lane, []) if heaps is not None else []
        live = [e[-1].run_at_ms for e in heap if e[-2] == e[-1].stamp and e[-1].state in WAITING_STATES]
        return min(live, default=None)

    def _heaps(self, queue: str) -> _QueueHeaps:
        heaps = self._queues.get(queue)
        if heaps is None:
            heaps = self._queues[queue] = _QueueHeaps()
        return heaps

    def _push(self, heap: list[Entry], entry: Entry) -> None:
        heapq.heappush(heap, entry)
        self._size += 1

    def _pop(self, heap: list[Entry]) -> Entry:
        self._size -= 1
        return heapq.heappop(heap)
