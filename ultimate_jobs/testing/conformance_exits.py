"""Job bodies that raise a ``BaseException`` which is not an ``Exception`` — ``sys.exit()``, ``GeneratorExit``,
a stray ``CancelledError``, an app's own ``BaseException`` — on the driver under test.

A mixin of :class:`~ultimate_jobs.testing.conformance.DriverConformance` (it uses the suite's ``async_jobs``
and ``timed`` fixtures). Each such raise fails its attempt with ``X_JOB_BODY_EXITED`` under the job's retry
policy — retried, then dead-lettered — for a sync body and an ``async def`` one, and the job behind it runs;
the user's Ctrl-C (a ``KeyboardInterrupt`` on the main thread, where ``run_jobs`` runs a sync body) goes on
up and hands its row back uncounted.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Callable
from typing import Any, Literal

import pytest

from ..contracts.protocol import JobDriver
from ..core.declare import job
from ..core.definition import JobHandle
from ..core.run import JobRun
from ..drivers.memory.events import MemoryEventBus
from ..errors import UltimateError
from .clock import FrozenClock
from .conformance_support import QUEUE
from .runner import run_jobs

_names = itertools.count(1)


class Halt(BaseException):
    """An app's own ``BaseException`` subclass (a library's "stop everything")."""


def _sys_exit() -> None:
    sys.exit(3)


def _generator_exit() -> None:
    raise GeneratorExit("closed under the body")


def _cancelled() -> None:
    raise asyncio.CancelledError("an inner task was cancelled")


def _halt() -> None:
    raise Halt("stop")


def _keyboard_interrupt() -> None:
    raise KeyboardInterrupt


EXITS = [
    pytest.param(_sys_exit, "builtins.SystemExit", id="sys.exit"),
    pytest.param(_generator_exit, "builtins.GeneratorExit", id="GeneratorExit"),
    pytest.param(_cancelled, "asyncio.exceptions.CancelledError", id="CancelledError"),
    pytest.param(_halt, f"{__name__}.Halt", id="BaseException"),
]

Kind = Literal["sync", "async"]


def exiting_job(kind: Kind, raise_it: Callable[[], None], **options: Any) -> JobHandle[Any, Any]:
    """A job on the suite's queue whose body (``kind``) calls ``raise_it``, under a name no scenario shares."""
    options.setdefault("retry", {"attempts": 2, "delay": 1000, "jitter": False})
    if kind == "sync":

        def body(run: JobRun[Any]) -> None:
            raise_it()

        return _declare(body, **options)

    async def async_body(run: JobRun[Any]) -> None:
        await asyncio.sleep(0)
        raise_it()

    return _declare(async_body, **options)


def _declare(body: Callable[[JobRun[Any]], Any], **options: Any) -> JobHandle[Any, Any]:
    return job(
        name=f"conformance.exits.{next(_names)}",
        queue=QUEUE,
        idempotency_key=lambda i: "k",
        tenant="none",
        **options,
    )(body)


class BodyExitContract:
    """A body's ``BaseException`` ends its attempt as a failure on every driver, and nothing is wedged."""

    @pytest.mark.parametrize(("raise_it", "raised"), EXITS)
    @pytest.mark.parametrize("kind", ["sync", "async"])
    def test_a_base_exception_from_the_body_is_retried_then_dead_lettered_and_the_next_job_runs(
        self,
        driver: JobDriver,
        clock: FrozenClock,
        async_jobs: MemoryEventBus,
        timed: None,
        kind: Kind,
        raise_it: Callable[[], None],
        raised: str,
    ) -> None:
        exiting = exiting_job(kind, raise_it).enqueue({})
        behind = _declare(lambda run: "ran").enqueue({})
        report = run_jobs(driver, clock=clock, queues=[QUEUE])
        attempts = [e for e in report.executions if e.job_id == exiting.id]
        assert [(e.outcome, e.code) for e in attempts] == [
            ("retried", "X_JOB_BODY_EXITED"),
            ("dead-lettered", "X_JOB_BODY_EXITED"),
        ]
        error = attempts[-1].error
        assert isinstance(error, UltimateError) and error.meta["raised"] == raised
        assert type(error.__cause__).__name__ == raised.rsplit(".", 1)[1]
        assert [(e.outcome, e.result) for e in report.executions if e.job_id == behind.id] == [("completed", "ran")]
        assert driver.operator is not None
        row = driver.operator.get(exiting.id)
        assert row is not None and (row.state, row.attempts) == ("dead", 2)
        assert row.last_error is not None and raised in row.last_error

    def test_an_async_bodys_keyboard_interrupt_is_a_failure_like_any_other(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus, timed: None
    ) -> None:
        # an async body runs on the lane's loop thread, never the main one: no Ctrl-C reaches it there
        exiting = exiting_job("async", _keyboard_interrupt, retry={"attempts": 1}).enqueue({})
        report = run_jobs(driver, clock=clock, queues=[QUEUE])
        assert [(e.outcome, e.code) for e in report.executions] == [("dead-lettered", "X_JOB_BODY_EXITED")]
        assert report.executions[0].error is not None
        assert report.executions[0].error.meta["raised"] == "builtins.KeyboardInterrupt"  # type: ignore[attr-defined]
        assert driver.operator is not None
        row = driver.operator.get(exiting.id)
        assert row is not None and row.state == "dead"

    def test_ctrl_c_in_a_sync_body_run_on_the_main_thread_goes_up_and_hands_the_row_back_uncounted(
        self, driver: JobDriver, clock: FrozenClock, async_jobs: MemoryEventBus, timed: None
    ) -> None:
        exiting = exiting_job("sync", _keyboard_interrupt).enqueue({})
        with pytest.raises(KeyboardInterrupt):
            run_jobs(driver, clock=clock, queues=[QUEUE])
        assert driver.operator is not None
        row = driver.operator.get(exiting.id)
        assert row is not None and (row.state, row.attempts) == ("ready", 0)
        assert row.last_error is not None and "KeyboardInterrupt" in row.last_error
