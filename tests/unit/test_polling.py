"""The one polling loop the worker, the relay and the scheduler share (``ultimate_jobs.runtime.polling``), on the
frozen clock: the floor while passes find work, the doubling wait to the ceiling while idle, the wake,
the back-off after a failed pass, the full batch that goes again at once, and the pass guard."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ultimate_jobs.runtime.polling import IDLE, IDLE_POLL_CEILING_MS, WOKEN_IDLE_POLL_CEILING_MS, Pass, PollingRole
from ultimate_jobs.testing import FrozenClock

WORKED = Pass(done=1, worked=True)
FULL = Pass(done=10, worked=True, again=True)
KICKED = "kicked"  # the pass is idle, and a wake arrives while it runs


class ScriptedRole(PollingRole):
    """A role whose passes follow ``script`` (a :class:`Pass`, an exception to raise, or ``KICKED``), run
    on the frozen clock: a wait advances the clock by its length unless a wake is already set. The loop
    stops once the script is spent."""

    event_prefix = "jobs.test-poll"

    def __init__(self, script: list[Any], *, floor: int = 200, ceiling: int | None = None) -> None:
        self._init_polling(poll_interval_ms=floor, idle_poll_max_ms=ceiling)
        self.clock = FrozenClock(start_ms=0)
        self.script = list(script)
        self.passes_at: list[int] = []
        self.failures: list[Exception] = []
        self.live = False
        self._accepting = True

    def _one_pass(self) -> Pass:
        self.passes_at.append(self.clock.now_ms())
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if step == KICKED:
            self.kick()
            return IDLE
        assert isinstance(step, Pass)
        return step

    def _wake_is_live(self) -> bool:
        return self.live

    def _pass_failed(self, error: Exception) -> None:
        self.failures.append(error)

    def _wait(self, wait_ms: int) -> bool:
        if not self.script:
            self._accepting = False
            return False
        if self._wake.is_set():
            return True  # woken: no time passes
        self.clock.advance(wait_ms)
        return False


def test_the_wait_is_the_floor_while_working_and_doubles_to_the_ceiling_while_idle() -> None:
    role = ScriptedRole([WORKED, WORKED, IDLE, IDLE, IDLE, IDLE, IDLE, IDLE, WORKED, IDLE])
    role._loop()
    waits = [b - a for a, b in zip(role.passes_at, role.passes_at[1:], strict=False)]
    assert waits == [200, 200, 400, 800, 1_600, 2_000, 2_000, 2_000, 200]


def test_a_wake_during_a_pass_passes_again_at_once_then_waits_from_the_floor() -> None:
    role = ScriptedRole([IDLE, IDLE, IDLE, KICKED, IDLE, IDLE])
    role._loop()
    assert role.passes_at == [0, 400, 1_200, 2_800, 2_800, 3_200]  # 400, 800, 1 600; woken; then 400 again


def test_a_failed_pass_is_logged_and_backs_off_like_an_idle_one(caplog: pytest.LogCaptureFixture) -> None:
    down = ConnectionError("the database is away")
    role = ScriptedRole([WORKED, down, down, down, WORKED, IDLE])
    with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
        role._loop()
    assert role.passes_at == [0, 200, 600, 1_400, 3_000, 3_200]
    assert role.failures == [down, down, down]
    failed = [r for r in caplog.records if r.getMessage() == "jobs.test-poll.pass-failed"]
    assert len(failed) == 3 and "the database is away" in failed[0].jobs["error"]  # type: ignore[attr-defined]


def test_a_full_batch_goes_again_without_waiting() -> None:
    role = ScriptedRole([IDLE, FULL, FULL, WORKED, IDLE])
    role._loop()
    assert role.passes_at == [0, 400, 400, 400, 600]


def test_the_ceiling_is_five_seconds_while_the_wake_is_proven_and_a_declared_one_wins() -> None:
    role = ScriptedRole([IDLE] * 6)
    assert role.idle_ceiling_ms() == IDLE_POLL_CEILING_MS
    role.live = True
    assert role.idle_ceiling_ms() == WOKEN_IDLE_POLL_CEILING_MS
    role._loop()
    waits = [b - a for a, b in zip(role.passes_at, role.passes_at[1:], strict=False)]
    assert waits == [400, 800, 1_600, 3_200, 5_000]
    declared = ScriptedRole([], ceiling=750)
    declared.live = True
    assert declared.idle_ceiling_ms() == 750


def test_a_ceiling_at_the_floor_never_doubles() -> None:
    role = ScriptedRole([IDLE, IDLE, IDLE, WORKED, IDLE], floor=1_000, ceiling=1_000)  # the scheduler's tick
    role._loop()
    assert role.passes_at == [0, 1_000, 2_000, 3_000, 4_000]


def test_a_wake_that_cannot_answer_counts_as_unproven(caplog: pytest.LogCaptureFixture) -> None:
    role = ScriptedRole([])

    def broken() -> bool:
        raise ConnectionError("the wake went away")

    role._wake_is_live = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="ultimate_jobs"):
        assert role.idle_ceiling_ms() == IDLE_POLL_CEILING_MS
    assert [r.getMessage() for r in caplog.records] == ["jobs.test-poll.wake-check-failed"]


def test_the_guard_runs_no_pass_after_the_accept_phase_and_close_waits_for_one_in_flight() -> None:
    role = ScriptedRole([WORKED])
    assert role._guarded_pass() == WORKED
    seen_busy: list[bool] = []

    def pass_that_looks() -> Pass:
        seen_busy.append(role._busy())
        return IDLE

    role._one_pass = pass_that_looks  # type: ignore[method-assign]
    role._guarded_pass()
    assert seen_busy == [True] and not role._busy()
    role.accept()
    assert role._guarded_pass() == IDLE and seen_busy == [True]  # no pass ran
