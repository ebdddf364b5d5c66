"""A fair queue's claim-ahead buffer (``TurnQueue``) and the slot pool that keeps one: waiting items are
handed out in lane turn, round by round, in order within a lane; a drain takes every waiting one back."""

from __future__ import annotations

import threading

from tests.helpers import eventually
from ultimate_jobs.worker.pool import SlotPool
from ultimate_jobs.worker.turns import TurnQueue, round_by_round

WAIT = 5.0


def org(item: str) -> str:
    return item.split("-")[0]


def drained(queue: TurnQueue[str]) -> list[str]:
    return [queue.popleft() for _ in range(len(queue))]


def test_lanes_take_turns_round_by_round_and_keep_their_own_order() -> None:
    queue: TurnQueue[str] = TurnQueue(org)
    for item in ("a-1", "a-2", "a-3", "a-4", "b-1", "c-1", "c-2"):
        queue.append(item)
    assert len(queue) == 7
    assert drained(queue) == ["a-1", "b-1", "c-1", "a-2", "c-2", "a-3", "a-4"]
    assert not queue


def test_a_lane_that_joins_waits_behind_the_lanes_already_waiting_for_one_turn_each() -> None:
    queue: TurnQueue[str] = TurnQueue(org)
    for item in ("a-1", "a-2", "a-3"):
        queue.append(item)
    assert queue.popleft() == "a-1"
    queue.append("b-1")
    assert drained(queue) == ["a-2", "b-1", "a-3"]


def test_an_item_put_back_goes_first_and_its_lane_keeps_its_order() -> None:
    queue: TurnQueue[str] = TurnQueue(org)
    for item in ("a-1", "a-2", "b-1"):
        queue.append(item)
    taken = queue.popleft()
    assert taken == "a-1"
    queue.appendleft(taken)  # what a worker does when the slot it was given could not start it
    assert drained(queue) == ["a-1", "b-1", "a-2"]


def test_iteration_and_clear_see_every_waiting_item() -> None:
    queue: TurnQueue[str] = TurnQueue(org)
    for item in ("a-1", "b-1", "a-2"):
        queue.append(item)
    assert sorted(queue) == ["a-1", "a-2", "b-1"]
    queue.clear()
    assert len(queue) == 0 and list(queue) == []
    try:
        queue.popleft()
    except IndexError:
        pass
    else:
        raise AssertionError("popleft on an empty TurnQueue must raise IndexError, as deque's does")


def test_a_fair_slot_pool_starts_waiting_items_in_lane_turn_and_hands_back_the_rest() -> None:
    started: list[str] = []
    gate = threading.Event()

    def run(item: str) -> None:
        started.append(item)
        gate.wait(WAIT)

    pool: SlotPool[str] = SlotPool(1, name="fair-test", run=run, lane=org)
    try:
        for item in ("a-1", "a-2", "a-3", "b-1", "a-4"):
            pool.submit(item)
        eventually(lambda: started == ["a-1"], timeout=WAIT)
        assert sorted(pool.take_queued()) == ["a-2", "a-3", "a-4", "b-1"]  # a drain hands back every waiting one
        for item in ("c-1", "c-2", "d-1"):
            pool.submit(item)
        gate.set()
        eventually(lambda: len(started) == 4, timeout=WAIT)
        assert started == ["a-1", "c-1", "d-1", "c-2"]  # what came after the hand-back, in turn
    finally:
        gate.set()
        pool.shutdown(wait=True)


def test_a_claims_rows_are_dispatched_round_by_round_across_lanes() -> None:
    claimed = ["a-1", "a-2", "a-3", "x-1", "b-1", "a-4", "b-2", "x-2"]
    lanes = {"a": "org-a", "b": "org-b"}  # x: a queue that is not fair
    assert round_by_round(claimed, lambda item: lanes.get(org(item))) == [
        "a-1", "x-1", "b-1", "x-2", "a-2", "b-2", "a-3", "a-4",
    ]  # fmt: skip
