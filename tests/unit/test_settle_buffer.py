"""The settle buffer on its own (``ultimate_jobs.worker.acks.SettleBuffer``): batches that form while a
flush is on the wire, ``ack()`` waiting for its answer, a failing flush told to every caller of its
batch, ``close()`` flushing what is pending, a late ``ack_later`` settling on the caller's thread, and a
callback that raises.

The driver is :class:`RecordingDriver`, a real class with the one member the buffer calls
(``ack_many``): it records every batch, can hold a flush on an Event and can raise. Every cross-thread
wait is bounded by ``WAIT``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.helpers import eventually
from ultimate_jobs.contracts.jobs import Ack, ClaimRef
from ultimate_jobs.worker.acks import SettleBuffer

WAIT = 5.0  # the bound on every cross-thread wait; a passing test never spends it
WORKER = "w-settle"


def ref(job_id: str) -> ClaimRef:
    return ClaimRef(WORKER, f"claim-{job_id}")


class RecordingDriver:
    """``ack_many`` that records each batch (ids, and the thread that flushed it). ``hold()`` makes the
    next flushes block until ``let_go()``; ``fail_with`` makes them raise; ``refuse`` names rows whose
    fence does not hold (they are answered as not landed)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.batches: list[list[str]] = []
        self.threads: list[str] = []
        self.durations: dict[str, int] = {}
        self.refuse: set[str] = set()
        self.fail_with: BaseException | None = None
        self._open = threading.Event()
        self._open.set()

    def ack_many(self, acks: Sequence[Ack]) -> frozenset[str]:
        with self._cond:
            self.batches.append([a.job_id for a in acks])
            self.threads.append(threading.current_thread().name)
            self._cond.notify_all()
        assert self._open.wait(WAIT), "a held flush was never let go"
        if self.fail_with is not None:
            raise self.fail_with
        self.durations.update((a.job_id, a.duration_ms) for a in acks)
        return frozenset(a.job_id for a in acks if a.job_id not in self.refuse)

    def hold(self) -> None:
        self._open.clear()

    def let_go(self) -> None:
        self._open.set()

    def wait_for_batches(self, count: int) -> list[list[str]]:
        """Block until ``count`` flushes have reached the driver; answers them."""
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.batches) >= count, WAIT), (
                f"{count} flushes expected; seen {self.batches}"
            )
            return [list(b) for b in self.batches]


class Answers:
    """Collects what ``ack_later`` callers hear: ``(job_id, landed, error, thread name)``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.heard: list[tuple[str, bool, BaseException | None, str]] = []

    def then(self, job_id: str) -> Any:
        def told(landed: bool, error: BaseException | None) -> None:
            with self._cond:
                self.heard.append((job_id, landed, error, threading.current_thread().name))
                self._cond.notify_all()

        return told

    def wait_for(self, *job_ids: str) -> dict[str, tuple[bool, BaseException | None, str]]:
        with self._cond:
            assert self._cond.wait_for(lambda: {h[0] for h in self.heard} >= set(job_ids), WAIT), (
                f"never heard {job_ids}; heard {self.heard}"
            )
            return {j: (landed, error, thread) for j, landed, error, thread in self.heard}


@pytest.fixture
def driver() -> Iterator[RecordingDriver]:
    d = RecordingDriver()
    yield d
    d.let_go()  # a failed assertion must not leave the flusher blocked


@pytest.fixture
def buffer(driver: RecordingDriver) -> Iterator[SettleBuffer]:
    b = SettleBuffer(driver, name="test-settle")  # type: ignore[arg-type]  # only ack_many is called
    yield b
    driver.let_go()
    assert b.close(WAIT)


def later(buffer: SettleBuffer, answers: Answers, *job_ids: str, duration_ms: int | None = 7) -> None:
    for job_id in job_ids:
        buffer.ack_later(Ack(job_id, ref(job_id), duration_ms or 0), then=answers.then(job_id))


def held_on_the_wire(driver: RecordingDriver, buffer: SettleBuffer, answers: Answers, job_id: str) -> None:
    """Hold the driver, queue ``job_id`` and wait until its flush (alone) reached the driver."""
    driver.hold()
    later(buffer, answers, job_id)
    assert driver.wait_for_batches(1) == [[job_id]]


def test_completions_that_arrive_during_a_flush_go_together_in_the_next(
    driver: RecordingDriver, buffer: SettleBuffer
) -> None:
    answers = Answers()
    held_on_the_wire(driver, buffer, answers, "j0")  # a quiet queue: the first flushes alone, at once
    assert buffer.pending() == 1

    later(buffer, answers, "j1", "j2", "j3", "j4", "j5")  # while j0's flush is on the wire
    assert buffer.pending() == 6
    assert driver.batches == [["j0"]]  # nothing else reached the driver meanwhile
    driver.let_go()

    heard = answers.wait_for("j0", "j1", "j2", "j3", "j4", "j5")
    assert driver.batches == [["j0"], ["j1", "j2", "j3", "j4", "j5"]]  # ONE second call
    assert all(landed and error is None for landed, error, _ in heard.values())
    assert {thread for _, _, thread in heard.values()} == {"test-settle"}  # told on the flusher
    assert set(driver.threads) == {"test-settle"}
    assert driver.durations["j3"] == 7
    eventually(lambda: buffer.pending() == 0, timeout=WAIT)


def test_a_batch_is_capped_at_max_batch(driver: RecordingDriver) -> None:
    buffer = SettleBuffer(driver, max_batch=2, name="test-settle-capped")  # type: ignore[arg-type]
    answers = Answers()
    try:
        held_on_the_wire(driver, buffer, answers, "a")
        later(buffer, answers, "b", "c", "d", "e", "f")
        driver.let_go()
        answers.wait_for("a", "b", "c", "d", "e", "f")
        assert driver.batches == [["a"], ["b", "c"], ["d", "e"], ["f"]]
    finally:
        driver.let_go()
        assert buffer.close(WAIT)


def test_ack_waits_and_answers_whether_the_row_landed(driver: RecordingDriver, buffer: SettleBuffer) -> None:
    driver.refuse.add("stale")
    assert buffer.ack("fresh", ref("fresh"), duration_ms=3) is True
    assert buffer.ack("stale", ref("stale")) is False  # the fence refused it: answered, not raised
    assert driver.batches == [["fresh"], ["stale"]]
    assert driver.durations == {"fresh": 3, "stale": 0}  # no duration is 0

    driver.hold()
    answer: list[bool] = []
    waiter = threading.Thread(target=lambda: answer.append(buffer.ack("held", ref("held"))), name="test-acker")
    waiter.start()
    driver.wait_for_batches(3)
    waiter.join(0.05)
    assert waiter.is_alive() and answer == []  # ack() does not return before its flush came back
    driver.let_go()
    waiter.join(WAIT)
    assert not waiter.is_alive() and answer == [True]


def test_a_flush_that_raises_reaches_every_caller_and_the_flusher_goes_on(
    driver: RecordingDriver, buffer: SettleBuffer
) -> None:
    answers = Answers()
    held_on_the_wire(driver, buffer, answers, "first")
    raised: list[BaseException] = []

    def waits() -> None:
        try:
            buffer.ack("waiter", ref("waiter"))
        except BaseException as exc:
            raised.append(exc)

    waiter = threading.Thread(target=waits, name="test-acker")
    waiter.start()
    eventually(lambda: buffer.pending() == 2, timeout=WAIT)  # the waiter's row is queued behind "first"
    later(buffer, answers, "second", "third")
    fault = ConnectionError("the database went away")
    driver.fail_with = fault
    driver.let_go()

    heard = answers.wait_for("first", "second", "third")
    waiter.join(WAIT)
    assert not waiter.is_alive()
    assert raised == [fault]  # ack() raises what its flush raised
    assert driver.batches == [["first"], ["waiter", "second", "third"]]
    assert all((landed, error) == (False, fault) for landed, error, _ in heard.values())

    driver.fail_with = None  # the flusher is still serving
    assert buffer.ack("after", ref("after")) is True
    later(buffer, answers, "later")
    assert answers.wait_for("later")["later"][:2] == (True, None)
    assert driver.batches[-2:] == [["after"], ["later"]]


def test_close_flushes_everything_pending(driver: RecordingDriver) -> None:
    buffer = SettleBuffer(driver, name="test-settle-close")  # type: ignore[arg-type]
    answers = Answers()
    held_on_the_wire(driver, buffer, answers, "j0")
    later(buffer, answers, *(f"j{n}" for n in range(1, 8)))

    closed: list[bool] = []
    closer = threading.Thread(target=lambda: closed.append(buffer.close(WAIT)), name="test-close")
    closer.start()
    closer.join(0.05)
    assert closer.is_alive()  # close() waits for the pending rows, it does not drop them
    driver.let_go()
    closer.join(WAIT)
    assert not closer.is_alive() and closed == [True]

    heard = answers.wait_for(*(f"j{n}" for n in range(8)))
    assert sorted(j for batch in driver.batches for j in batch) == sorted(f"j{n}" for n in range(8))
    assert all(landed and error is None for landed, error, _ in heard.values())
    assert buffer.pending() == 0


def test_close_answers_false_when_the_flush_outlasts_its_timeout(driver: RecordingDriver) -> None:
    buffer = SettleBuffer(driver, name="test-settle-slow")  # type: ignore[arg-type]
    answers = Answers()
    held_on_the_wire(driver, buffer, answers, "slow")
    assert buffer.close(0.05) is False
    driver.let_go()
    assert answers.wait_for("slow")["slow"][:2] == (True, None)
    assert buffer.close(WAIT) is True


def test_close_with_nothing_ever_queued_returns_at_once(driver: RecordingDriver) -> None:
    buffer = SettleBuffer(driver)  # type: ignore[arg-type]
    assert buffer.close(WAIT) is True
    assert driver.batches == []


def test_an_ack_later_after_close_settles_on_the_callers_thread(driver: RecordingDriver, buffer: SettleBuffer) -> None:
    answers = Answers()
    later(buffer, answers, "before")
    answers.wait_for("before")
    assert buffer.close(WAIT) is True

    later(buffer, answers, "late")
    heard = answers.wait_for("late")  # already told: ack_later returned after the settle
    assert heard["late"] == (True, None, threading.current_thread().name)
    assert driver.threads == ["test-settle", threading.current_thread().name]
    assert buffer.ack("late-waiter", ref("late-waiter")) is True
    assert driver.batches == [["before"], ["late"], ["late-waiter"]]


def test_a_callback_that_raises_does_not_stop_the_flusher(
    driver: RecordingDriver, buffer: SettleBuffer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    answers = Answers()

    def explodes(landed: bool, error: BaseException | None) -> None:
        raise RuntimeError("a caller's bug")

    driver.hold()
    buffer.ack_later(Ack("boom", ref("boom"), 1), then=explodes)
    driver.wait_for_batches(1)
    later(buffer, answers, "neighbour")  # flushed in the batch after the one whose callback raises
    buffer.ack_later(Ack("boom2", ref("boom2"), 1), then=explodes)
    later(buffer, answers, "same-batch")  # told after a raising callback of its own batch
    driver.let_go()

    heard = answers.wait_for("neighbour", "same-batch")
    assert heard["neighbour"][:2] == (True, None) and heard["same-batch"][:2] == (True, None)
    assert buffer.ack("after", ref("after")) is True
    failed = [r for r in caplog.records if r.getMessage() == "jobs.settle.callback-failed"]
    assert sorted(r.jobs["job_id"] for r in failed) == ["boom", "boom2"]
    assert all(r.levelno == logging.ERROR for r in failed)
