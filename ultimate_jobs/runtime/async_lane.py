"""The async lane: one event loop on a thread of its own, running ``async def`` job bodies many at once.

A worker process (or one ``run_jobs`` call) owns one lane. Its loop runs every async attempt as an
asyncio task; the sync calls those attempts make — the driver's settle, ``save_step``, a fleet slot's
lease — go through :meth:`AsyncLane.offload` to a few offload threads, because Django refuses a sync
database call on a thread with a running loop (``SynchronousOnlyOperation``).

Which thread and connection a body's Django ORM uses (``await Order.objects.aget(...)``, or
``sync_to_async(fn)()``, thread-sensitive by default):

- on a started lane, one of the lane's **ORM threads** (``orm_threads``, 8 by default): each task
  the lane runs is given one of them, in turn, for its whole life, and asgiref sends every
  thread-sensitive call the task makes there — as Django gives each request of an ASGI server a thread
  of its own, so a ``sync_to_async`` function's ``transaction.atomic()`` and the task's later ORM calls
  meet the same connection. Tasks that share an ORM thread take turns on it. So the async bodies of a
  process hold at most ``orm_threads`` connections per database, kept across jobs and closed when the
  lane stops: the count does not grow with the number of jobs in flight. (``sync_to_async(fn,
  thread_sensitive=False)`` runs on the loop's default executor, whose connections nobody manages: keep
  ORM calls thread-sensitive, Django's default.)
- under :meth:`AsyncLane.run_here` (``run_jobs``), the calling thread: the offloads and the ORM calls of
  the attempt run on the caller's own connection, so a test's transaction is the one the body reads.

The run's actor, tenant and cancel signal are context variables: they follow every call into those
threads (asgiref and :meth:`offload` copy the context), so the tenant guard and Postgres row-level
security hold there as on a sync body's thread.

>>> lane = AsyncLane(name="worker-1")
>>> lane.start()
>>> lane.submit(lambda: fetch_rates()).result()
>>> lane.stop(wait=True, timeout=25)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import importlib
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from asgiref.current_thread_executor import CurrentThreadExecutor
from asgiref.sync import AsyncToSync, SyncToAsync, ThreadSensitiveContext

from ..errors import InvariantError, JobDrainedError
from .dbconn import close_thread_connections

__all__ = ["EVENT_LOOPS", "AsyncLane", "event_loop_factory"]

logger = logging.getLogger("ultimate_jobs")

T = TypeVar("T")

DEFAULT_ORM_THREADS = 8
"""How many threads (so connections per database) a lane's async bodies run their Django ORM calls on."""

CANCELLED_GRACE_S = 5.0
"""How long :meth:`AsyncLane.stop` waits for tasks it cancelled to unwind before it stops the loop anyway."""

_caller: contextvars.ContextVar[concurrent.futures.Executor | None] = contextvars.ContextVar(
    "ultimate_jobs_lane_caller", default=None
)
"""Inside :meth:`AsyncLane.run_here`: the calling thread's executor, where that run's offloads go."""


EVENT_LOOPS = ("auto", "asyncio", "uvloop")
"""What ``ULTIMATE_JOBS["EVENT_LOOP"]`` may name: ``auto`` (uvloop when it is installed, else asyncio's own),
``asyncio`` or ``uvloop``."""


def event_loop_factory(kind: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """How a lane makes its loop: ``uvloop.new_event_loop`` when ``kind`` is ``uvloop``, or ``auto`` and uvloop
    is importable; else ``asyncio.new_event_loop``. ``uvloop`` without uvloop installed is ``X_INVARIANT``."""
    if kind not in EVENT_LOOPS:
        raise InvariantError(f"event loop {kind!r}: use one of {EVENT_LOOPS}", {"event_loop": kind})
    if kind == "asyncio":
        return asyncio.new_event_loop
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if kind == "uvloop":
            raise InvariantError(
                "event loop 'uvloop': uvloop is not installed; pip install 'ultimate_jobs[uvloop]'",
                {"event_loop": kind},
            ) from None
        return asyncio.new_event_loop
    return uvloop.new_event_loop  # type: ignore[no-any-return]


class _ThreadPool(concurrent.futures.Executor):
    """A fixed set of threads that each close their Django connections when the pool shuts down — which a
    ``ThreadPoolExecutor`` cannot be told to do on its own threads."""

    def __init__(self, names: list[str]) -> None:
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [
            # a fresh context: the pool outlives any run that happens to start it
            threading.Thread(target=contextvars.Context().run, args=(self._work,), name=name, daemon=True)
            for name in names
        ]
        self._shutdown = False
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        if self._shutdown:
            raise RuntimeError("the lane's thread pool is shut down")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put((future, lambda: fn(*args, **kwargs)))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def _work(self) -> None:
        try:
            while (item := self._queue.get()) is not None:
                future, call = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(call())
                except BaseException as exc:  # handed to the awaiting task, never lost
                    future.set_exception(exc)
                del item, future, call
        finally:
            close_thread_connections()


class AsyncLane:
    """One event loop on a thread of its own (one per worker process / run_jobs call), running async job
    bodies many at once, plus a few offload threads for the sync driver calls those runs make (settle,
    save_step, leases) — Django refuses sync DB calls on a thread with a running loop.

    >>> lane = AsyncLane(name="worker-1", offload_threads=4)
    >>> lane.start()
    >>> future = lane.submit(lambda: execute_job_async(claimed, env, lane=lane))
    >>> future.result().outcome
    'completed'
    >>> lane.stop(wait=True, timeout=25)
    """

    def __init__(
        self,
        *,
        name: str,
        offload_threads: int = 4,
        orm_threads: int = DEFAULT_ORM_THREADS,
        new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        if offload_threads < 1:
            raise ValueError("AsyncLane(offload_threads=...) must be at least 1")
        if orm_threads < 1:
            raise ValueError("AsyncLane(orm_threads=...) must be at least 1")
        self.name = name
        self.offload_threads = offload_threads
        self.orm_threads = orm_threads
        self._new_loop = new_loop
        self.loop: asyncio.AbstractEventLoop
        """The lane's event loop; set by :meth:`start`."""
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._offload: _ThreadPool | None = None
        self._orm: list[_ThreadPool] = []
        # one asgiref thread-sensitive context per ORM thread, never entered: a task's context points at one
        # (SyncToAsync.thread_sensitive_context), and asgiref looks its executor up by it
        self._orm_keys: list[ThreadSensitiveContext] = []
        self._next_orm = itertools.count()

    def __repr__(self) -> str:
        return f"<AsyncLane {self.name} running={self.running()}>"

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop's thread, the offload threads and the ORM threads. Idempotent; refused once stopped."""
        with self._lock:
            self._refuse_if_stopped()
            if self.thread is not None:
                return
            self.loop = self._new_loop()
            self._offload = _ThreadPool([f"{self.name}-offload-{n}" for n in range(self.offload_threads)])
            self._orm = [_ThreadPool([f"{self.name}-orm-{n}"]) for n in range(self.orm_threads)]
            self._orm_keys = [ThreadSensitiveContext() for _ in self._orm]
            for key, pool in zip(self._orm_keys, self._orm, strict=True):
                SyncToAsync.context_to_thread_executor[key] = pool
            # a thread-sensitive call made on the loop outside any task the lane spawned (a callback) goes to
            # the thread registered for the loop: the first ORM thread
            AsyncToSync.loop_thread_executors[self.loop] = self._orm[0]  # type: ignore[assignment]
            ready = threading.Event()
            self.thread = threading.Thread(
                target=contextvars.Context().run,
                args=(self._run_loop, ready),
                name=f"{self.name}-loop",
                daemon=True,
            )
            self.thread.start()
        ready.wait()

    def _run_loop(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def stop(self, *, wait: bool, timeout: float | None = None) -> None:
        """Refuse new submits; with ``wait`` let the running tasks finish (up to ``timeout`` seconds), then
        cancel what is left, stop the loop, join its thread and close the lane's threads' DB connections.
        Idempotent. Never call it from the loop's own thread."""
        with self._lock:
            self._stopped = True
            thread = self.thread
        if thread is None:
            return  # never started: nothing runs, nothing to close
        if threading.current_thread() is thread:
            raise RuntimeError(f"AsyncLane {self.name}: stop() from the lane's own loop would wait on itself")
        if thread.is_alive():
            drained = asyncio.run_coroutine_threadsafe(self._drain(wait, timeout), self.loop)
            try:
                drained.result()
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                thread.join()
        AsyncToSync.loop_thread_executors.pop(self.loop, None)
        for key in self._orm_keys:
            SyncToAsync.context_to_thread_executor.pop(key, None)
        for pool in (self._offload, *self._orm):
            if pool is not None:
                pool.shutdown(wait=True)
        if not self.loop.is_closed():
            self.loop.close()

    async def _drain(self, wait: bool, timeout: float | None) -> None:
        pending = set(self._tasks)
        if wait and pending:
            _, pending = await asyncio.wait(pending, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            _, stuck = await asyncio.wait(pending, timeout=CANCELLED_GRACE_S)
            for task in stuck:
                logger.error("jobs.lane.task-ignored-cancel", extra={"jobs": {"lane": self.name, "task": repr(task)}})
        await self.loop.shutdown_asyncgens()
        await self.loop.shutdown_default_executor()

    def running(self) -> int:
        """How many tasks are in flight on the loop."""
        return len(self._tasks)

    def is_alive(self) -> bool:
        """Whether the loop's thread runs (a task on a lane whose loop died will never end)."""
        thread = self.thread
        return thread is not None and thread.is_alive()

    # -- work ----------------------------------------------------------------------------------

    def submit(self, make: Callable[[], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        """Schedule ``make()`` as a task on the loop, from any thread; the task runs in a copy of the
        caller's context variables. Answers a future of its result. ``X_DRAINING`` once the lane stopped."""
        context = contextvars.copy_context()
        with self._lock:
            self._refuse_if_stopped()
            if self.thread is None:
                raise RuntimeError(f"AsyncLane {self.name}: call start() before submit()")
            future: concurrent.futures.Future[T] = concurrent.futures.Future()
            self.loop.call_soon_threadsafe(self._spawn, make, future, context)
        return future

    def spawn_many(self, runs: list[tuple[Callable[[], Coroutine[Any, Any, Any]], contextvars.Context]]) -> None:
        """Schedule each ``make()`` of ``runs`` as a task on the loop in its ``context`` (a copy of the context
        variables the caller took), from any thread, in one wake of the loop: a worker hands it a claim's
        async rows at once. Nobody waits on them: each must settle its own outcome (a raise is logged
        ``jobs.lane.task-failed``). ``X_DRAINING`` once the lane stopped."""
        with self._lock:
            self._refuse_if_stopped()
            if self.thread is None:
                raise RuntimeError(f"AsyncLane {self.name}: call start() before spawn_many()")
            self.loop.call_soon_threadsafe(self._spawn_all, runs)

    def spawn_here(self, make: Callable[[], Coroutine[Any, Any, Any]], context: contextvars.Context) -> None:
        """:meth:`spawn_many` for one task, from the loop's own thread (a task that ends starts the next one
        waiting): no wake of the loop. ``X_DRAINING`` once the lane stopped."""
        self._refuse_if_stopped()
        self._task(make, context).add_done_callback(self._forgotten)

    def _spawn_all(self, runs: list[tuple[Callable[[], Coroutine[Any, Any, Any]], contextvars.Context]]) -> None:
        for make, context in runs:
            try:
                task = self._task(make, context)
            except BaseException as exc:  # make() itself raised: no task, nothing ran
                logger.error("jobs.lane.task-failed", extra={"jobs": {"lane": self.name, "error": repr(exc)}})
                continue
            task.add_done_callback(self._forgotten)

    def _forgotten(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error("jobs.lane.task-failed", extra={"jobs": {"lane": self.name, "error": repr(error)}})

    def _task(self, make: Callable[[], Coroutine[Any, Any, T]], context: Any) -> asyncio.Task[T]:
        if self._orm_keys:  # this task's thread-sensitive calls (its Django ORM) go to one ORM thread, in turn
            key = self._orm_keys[next(self._next_orm) % len(self._orm_keys)]
            context.run(SyncToAsync.thread_sensitive_context.set, key)
        task = self.loop.create_task(make(), context=context)  # make() in the loop: a coroutine never orphaned
        self._tasks.add(task)
        return task

    def _spawn(
        self, make: Callable[[], Coroutine[Any, Any, T]], future: concurrent.futures.Future[T], context: Any
    ) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            task = self._task(make, context)
        except BaseException as exc:
            future.set_exception(exc)
            return
        task.add_done_callback(lambda done: self._finished(done, future))

    def _finished(self, task: asyncio.Task[T], future: concurrent.futures.Future[T]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            future.set_exception(asyncio.CancelledError())  # the lane's stop cancelled it
            return
        error = task.exception()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(task.result())

    def run_here(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` on the loop and serve its offloads — and its thread-sensitive ``sync_to_async``
        calls, Django's async ORM — on this calling thread until it finishes; answer its result.

        ``run_jobs`` drives async attempts so: the driver's calls and the body's ORM then use the caller's
        own connection, so a test's transaction (and a SQLite file's one writer) is the one they see."""
        self.start()
        executor = CurrentThreadExecutor(None)

        async def here() -> T:
            _caller.set(executor)
            AsyncToSync.executors.current = executor  # where asgiref sends this task's thread-sensitive calls
            return await make()

        future = self.submit(here)
        executor.run_until_future(future)
        return future.result()

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """From the loop: run the sync ``fn(*args)`` on an offload thread (the caller's thread under
        :meth:`run_here`) with the current context variables, and answer its result."""
        executor = _caller.get() or self._offload
        if executor is None:
            raise RuntimeError(f"AsyncLane {self.name}: offload() outside a started lane")
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(executor, context.run, fn, *args)

    def _refuse_if_stopped(self) -> None:
        if self._stopped:
            raise JobDrainedError(
                f"AsyncLane {self.name} is stopped: it starts no new async run; build a new lane "
                "(a worker builds one per process, run_jobs one per call)",
                {"lane": self.name},
            )
