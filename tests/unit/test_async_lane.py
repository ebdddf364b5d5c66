"""The async lane: one loop on its own thread, offloads with the caller's context, a stop that waits or
cancels and leaves no thread behind, and a clear refusal once stopped."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async

from ultimate_jobs.core.scope import Actor, acting_as, current_tenant
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.runtime.async_lane import AsyncLane

marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")


@pytest.fixture
def lane() -> Iterator[AsyncLane]:
    built = AsyncLane(name="test-lane", offload_threads=2, orm_threads=2)
    built.start()
    try:
        yield built
    finally:
        built.stop(wait=False)


def lane_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("test-lane")]


def test_start_is_idempotent_and_submit_runs_on_the_loop_thread(lane: AsyncLane) -> None:
    lane.start()

    async def where() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    assert lane.submit(where).result(timeout=10) == "test-lane-loop"
    assert lane.thread is not None and lane.thread.name == "test-lane-loop"
    assert sorted(lane_threads()) == [
        "test-lane-loop",
        "test-lane-offload-0",
        "test-lane-offload-1",
        "test-lane-orm-0",
        "test-lane-orm-1",
    ]


def test_a_task_runs_in_a_copy_of_the_callers_context(lane: AsyncLane) -> None:
    async def read() -> tuple[str, str | None]:
        return marker.get(), current_tenant()

    token = marker.set("caller")
    try:
        with acting_as(Actor(org_id="org-7")):
            future = lane.submit(read)
    finally:
        marker.reset(token)
    assert future.result(timeout=10) == ("caller", "org-7")


def test_offload_runs_off_the_loop_with_the_tasks_context(lane: AsyncLane) -> None:
    def sync_part() -> tuple[str, str, str | None]:
        return threading.current_thread().name, marker.get(), current_tenant()

    async def task() -> tuple[str, str, str | None]:
        marker.set("task")
        with acting_as(Actor(org_id="org-3")):
            return await lane.offload(sync_part)

    thread, seen, tenant = lane.submit(task).result(timeout=10)
    assert thread.startswith("test-lane-offload-") and (seen, tenant) == ("task", "org-3")


def test_thread_sensitive_sync_to_async_runs_on_the_lanes_orm_thread(lane: AsyncLane) -> None:
    async def task() -> list[str]:
        name = sync_to_async(lambda: threading.current_thread().name)
        return [await name(), await name()]

    # one task keeps one ORM thread (its connection) for its whole life; the next task is given the next one
    assert lane.submit(task).result(timeout=10) == ["test-lane-orm-0", "test-lane-orm-0"]
    assert lane.submit(task).result(timeout=10) == ["test-lane-orm-1", "test-lane-orm-1"]
    assert lane.submit(task).result(timeout=10) == ["test-lane-orm-0", "test-lane-orm-0"]


def test_run_here_serves_offloads_and_the_orm_on_the_calling_thread() -> None:
    lane = AsyncLane(name="test-lane", offload_threads=1)
    here = threading.current_thread().name

    async def task() -> tuple[str, str]:
        offloaded = await lane.offload(lambda: threading.current_thread().name)
        orm = await sync_to_async(lambda: threading.current_thread().name)()
        return offloaded, orm

    try:
        assert lane.run_here(task) == (here, here)
        assert lane.run_here(task) == (here, here)  # again, on the same lane
    finally:
        lane.stop(wait=False)
    assert lane_threads() == []


def test_stop_with_wait_lets_running_tasks_finish_and_joins_every_thread() -> None:
    lane = AsyncLane(name="test-lane")
    lane.start()
    started = threading.Event()

    async def work() -> str:
        started.set()
        await asyncio.sleep(0.05)
        return "finished"

    future = lane.submit(work)
    assert started.wait(timeout=10)
    assert lane.running() == 1
    lane.stop(wait=True)
    assert future.result(timeout=0) == "finished"
    assert lane.running() == 0 and lane_threads() == [] and lane.loop.is_closed()


def test_stop_cancels_what_outlives_the_wait() -> None:
    lane = AsyncLane(name="test-lane")
    lane.start()
    unwound = threading.Event()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            unwound.set()
            raise

    future = lane.submit(forever)
    assert started.wait(timeout=10)
    lane.stop(wait=True, timeout=0.01)
    assert unwound.is_set()
    with pytest.raises(asyncio.CancelledError):
        future.result(timeout=0)
    assert lane_threads() == []


def test_stop_without_wait_cancels_at_once_and_is_idempotent() -> None:
    lane = AsyncLane(name="test-lane")
    lane.start()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    future = lane.submit(forever)
    assert started.wait(timeout=10)
    lane.stop(wait=False)
    lane.stop(wait=False)
    assert future.cancelled() or isinstance(future.exception(timeout=0), asyncio.CancelledError)
    assert lane_threads() == []


def test_submit_after_stop_is_refused_with_a_coded_error() -> None:
    lane = AsyncLane(name="test-lane")
    lane.start()
    lane.stop(wait=True)

    async def never() -> None:
        raise AssertionError("a stopped lane ran a task")

    with pytest.raises(UltimateError) as refused:
        lane.submit(never)
    assert refused.value.code == "X_DRAINING" and "test-lane" in refused.value.message
    with pytest.raises(UltimateError):
        lane.start()
    with pytest.raises(UltimateError):
        lane.run_here(never)


def test_a_lane_never_started_stops_quietly_and_submit_asks_for_start() -> None:
    idle = AsyncLane(name="test-lane")
    with pytest.raises(RuntimeError, match="start"):
        idle.submit(asyncio.sleep)
    idle.stop(wait=True)
    assert lane_threads() == []


def test_stop_from_the_loops_own_thread_is_refused(lane: AsyncLane) -> None:
    async def stop_self() -> None:
        lane.stop(wait=False)

    with pytest.raises(RuntimeError, match="own loop"):
        lane.submit(stop_self).result(timeout=10)


def test_a_task_error_reaches_the_future(lane: AsyncLane) -> None:
    async def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        lane.submit(fails).result(timeout=10)


def test_offload_threads_must_be_at_least_one() -> None:
    with pytest.raises(ValueError):
        AsyncLane(name="test-lane", offload_threads=0)
