"""The event loop async jobs run on: uvloop's when it is installed (``EVENT_LOOP = "auto"``), asyncio's own on
request, and a clear refusal for a loop that is not there."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import pytest

from ultimate_jobs.errors import InvariantError
from ultimate_jobs.runtime.async_lane import AsyncLane, event_loop_factory
from ultimate_jobs.worker import job_worker

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


def test_asyncio_is_asyncio_s_own_loop() -> None:
    assert event_loop_factory("asyncio") is asyncio.new_event_loop


def test_auto_is_uvloop_where_it_is_installed_and_asyncio_elsewhere() -> None:
    made = event_loop_factory("auto")()
    try:
        assert type(made).__module__.split(".")[0] == ("uvloop" if HAS_UVLOOP else "asyncio")
    finally:
        made.close()


def test_a_named_loop_that_is_not_installed_is_refused_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # an import of it now fails, as where it is not installed
    with pytest.raises(InvariantError, match=r"ultimate_jobs\[uvloop\]"):
        event_loop_factory("uvloop")
    assert event_loop_factory("auto") is asyncio.new_event_loop  # auto falls back, quietly and correctly


def test_an_unknown_loop_is_refused() -> None:
    with pytest.raises(InvariantError, match="use one of"):
        event_loop_factory("trio")


def test_a_lane_runs_its_tasks_on_the_loop_it_was_given() -> None:
    lane = AsyncLane(name="loop-kind", new_loop=event_loop_factory("auto"))
    lane.start()
    try:

        async def kind() -> str:
            return type(asyncio.get_running_loop()).__module__.split(".")[0]

        assert lane.submit(kind).result(timeout=10) == ("uvloop" if HAS_UVLOOP else "asyncio")
    finally:
        lane.stop(wait=True, timeout=5)


def test_job_worker_refuses_an_unknown_event_loop_at_build() -> None:
    from ultimate_jobs.drivers.memory import MemoryDriver

    with pytest.raises(InvariantError, match="trio"):
        job_worker(driver=MemoryDriver(), context=lambda: None, queues=["default"], event_loop="trio")
