"""The worker: claim work for its queues, run each job in a slot — a thread of its queue's pool for a sync
body, a task on the process's one event loop (:class:`~ultimate_jobs.runtime.async_lane.AsyncLane`) for an
``async def`` body — keep every lease alive, stop bodies on deadlines, and drain in two phases on
SIGTERM/SIGINT.

Its lifecycle and its loop are every role's (:class:`ultimate_jobs.runtime.polling.PollingRole`); its heartbeat and
registry row live in :mod:`.heartbeat`, its options and defaults in :mod:`.build` (``job_worker()``),
and this module keeps the claim pass, dispatch into slots, the claim-ahead buffer and accounting; the
loop's watchdog lives in :mod:`.watchdog`.
:meth:`JobWorker.run_once` — one pass — is what tests drive directly.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from ..contracts.jobs import ClaimedJob, NackOptions
from ..contracts.protocol import JobDriver
from ..core import registry
from ..core.attempt import completion_settled
from ..core.clock import Clock, SystemClock, Timer
from ..core.definition import JobHandle
from ..core.execute import (
    AttemptEnv,
    JobExecution,
    announce_exhausted,
    drop_exhausted_names,
    execute_job,
    execute_job_async,
)
from ..core.logs import log_event
from ..core.rates import RATE_HOLD_MS, RATE_LEAD_MS
from ..core.signals import CancelSignal
from ..errors import ConcurrencyUnenforceableError, JobDrainedError, RateLimitUnenforceableError
from ..guards.limits import LimitConfig, Limiter
from ..runtime.async_lane import AsyncLane
from ..runtime.counters import count_outcome, prime_counters
from ..runtime.dbconn import release_stale_connections
from ..runtime.polling import Pass, PollingRole
from .acks import SettleBuffer
from .heartbeat import LeaseRenewal
from .inflight import InFlight, give_back, hooks_for
from .pool import SlotPool
from .turns import TurnQueue, round_by_round
from .watchdog import LOOP_STALL_MS, LoopWatchdog

# Claim ahead only for short jobs: a buffered job waits for a slot, and behind long bodies another worker
# could have started it at once. Past this average duration a queue claims for its free slots only.
CLAIM_AHEAD_SHORT_JOB_MS = 50
SETTLE_BACKLOG_PER_SLOT = 10
"""Past this many unsettled completions per slot the claim loop waits for the settle buffer. Twice a claim's
rows at the default claim-ahead (a slot plus 4), so the next claim goes out while the last one's acks are on
the wire: at 4 a claim of short jobs waited for their flush each time (on a 10-slot no-op drain, 10 per slot
measured about 15% more jobs/s). The rows past it are what a killed worker runs again."""
RECENT_EXECUTIONS = 1_000
HANDBACK_TIMER_WINDOW_MS = 60_000
ASYNC_AHEAD_DIVISOR = 4  # an async queue claims up to a quarter of its async slots ahead, while its jobs are short
ASYNC_AHEAD_SHORT_JOB_MS = 1_000  # "short" for an async job: the buffer's wait is small beside its run
ASYNC_CLAIM_BATCH_DIVISOR = 16  # past half busy, an async queue claims once 1/16 of its slots are free
ASYNC_ASK_START = 32  # a queue of both kinds asks this much async room at first; it doubles while filled
ASYNC_REFUSED_RECHECK_MS = 60_000  # an async row on a queue this worker runs no async job on is offered again then
KEPT_PER_SLOT = 16
"""A queue's worker keeps at most this many runs per slot waiting off their slots for a reserved rate instant
(:data:`~ultimate_jobs.core.rates.RATE_KEEP_MS`); past that, a run waiting for its instant is handed back."""
LANE_STOP_S = 2.0  # how long the drain's end waits for the event loop's tasks to unwind (+1 s for the loop itself)


@dataclass(slots=True)
class WorkerStats:
    """What this worker did since it started."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    dead: int = 0
    dropped: int = 0
    suspended: int = 0
    interrupted: int = 0
    refused: int = 0
    shed: int = 0
    leases_lost: int = 0
    abandoned: int = 0
    returned: int = 0
    """Sync rows a claim took beyond the queue's free threads (its room was async capacity), handed back
    to ready at once, uncounted."""
    kept: int = 0
    """Runs that left their slot to wait, their claim kept, for the instant their rate limit reserved."""


_STAT_BY_OUTCOME = {
    "completed": "completed",
    "retried": "retried",
    "dead-lettered": "dead",
    "dropped": "dropped",
    "suspended": "suspended",
    "interrupted": "interrupted",
    "refused": "refused",
}


class JobWorker(LeaseRenewal, PollingRole):
    """A worker over ``driver``. Build it with :func:`job_worker`."""

    event_prefix = "jobs.worker"

    def __init__(
        self,
        *,
        driver: JobDriver,
        context: Callable[[], Any],
        queues: Sequence[str],
        slots: Mapping[str, int],
        claim_ahead: Mapping[str, int],
        async_slots: Mapping[str, int] | None = None,
        clock: Clock,
        visibility_timeout_ms: int,
        heartbeat_interval_ms: int,
        poll_interval_ms: int,
        idle_poll_max_ms: int | None,
        limits: LimitConfig,
        drain_deadline_ms: int,
        worker_id: str,
        new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self.driver = driver
        self.context = context
        self.queues = tuple(queues)
        self.slots = dict(slots)
        self.async_slots = {q: (async_slots or {}).get(q, 0) for q in self.queues}
        self.loop_stall_ms = LOOP_STALL_MS
        self.claim_ahead = dict(claim_ahead)
        self.clock = clock
        self.visibility_timeout_ms = visibility_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.drain_deadline_ms = drain_deadline_ms
        self.worker_id = worker_id
        self._new_loop = new_loop  # the async lane's event loop (uvloop's when installed, by default)
        self.host = socket.gethostname()
        self.stats = WorkerStats()
        # the most recent attempts, for tests and the demo; bounded so a long-lived worker does not grow
        self.executions: deque[JobExecution] = deque(maxlen=RECENT_EXECUTIONS)
        self._acks = SettleBuffer(driver)
        # what every attempt shares; a completion nobody waits on inside the attempt is left to the buffer
        self._env = AttemptEnv(
            driver=driver,
            clock=clock,
            context=context,
            visibility_timeout_ms=visibility_timeout_ms,
            acker=self._acks,
            leave_completions=True,
            fleet_per_tenant=limits.fleet_per_tenant,
        )
        self._limiter = Limiter(limits, clock)
        self._init_polling(poll_interval_ms=poll_interval_ms, idle_poll_max_ms=idle_poll_max_ms)
        self._flights: dict[str, InFlight] = {}  # by claim token: a zombie and its next attempt share a job id
        self._occupied: dict[str, int] = dict.fromkeys(self.queues, 0)  # running or waiting in the claim-ahead buffer
        self._settling = 0  # completions whose slot moved on before their settle landed
        self._avg_ms: dict[str, float] = dict.fromkeys(self.queues, 0.0)  # recent attempt duration, per queue
        self._pools: dict[str, SlotPool[InFlight]] = {}
        self._async_busy: dict[str, int] = dict.fromkeys(self.queues, 0)  # async runs in flight, per queue
        # claimed async rows waiting for a free async slot (the claim-ahead buffer): a run that ends starts the next
        self._async_waiting: dict[str, deque[_Waiting] | TurnQueue[_Waiting]] = {q: deque() for q in self.queues}
        self._async_ask: dict[str, int] = dict(self.async_slots)  # what a claim asks of the async room (mixed queues)
        self._sync_served: frozenset[str] = frozenset()  # queues a sync job (or no job of ours) may come from
        self._lane: AsyncLane | None = None
        self._watchdog: LoopWatchdog | None = None
        self._started_ms = 0
        self._timers: list[Timer] = []
        self._handbacks: set[Timer] = set()
        self._kept: dict[str, _Kept] = {}  # by claim token: runs waiting off their slot for a reserved instant
        self._unsubscribe: Callable[[], None] | None = None
        self._drop = frozenset[str]()
        self._beat_running = threading.Lock()
        self._beat_due = threading.Event()
        self._beat_stop = threading.Event()
        self._beat_thread: threading.Thread | None = None
        self._hand_back_on_close = False
        self._recorded_ms = 0  # when this worker's registry row was last written

    # -- the lifecycle's hooks (ultimate_jobs.runtime.lifecycle.RoleLifecycle) ---------------------------

    def _ident(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id}

    def _begin(self) -> None:
        """Refuse an unenforceable declaration, register, arm the heartbeat, subscribe to the wake."""
        handles = [h for h in registry.registered("job") if isinstance(h, JobHandle)]
        if self.driver.leases is None and self._env.fleet_per_tenant:
            raise ConcurrencyUnenforceableError(
                f"LIMITS['FLEET_PER_TENANT'] caps {sorted(self._env.fleet_per_tenant)} and the {self.driver.name} "
                "driver has no lease store; use one of the built-in drivers or drop the cap",
                {"queues": sorted(self._env.fleet_per_tenant), "driver": self.driver.name},
            )
        if self.driver.leases is None:
            declaring = sorted(h.name for h in handles if h.concurrency is not None)
            if declaring:
                raise ConcurrencyUnenforceableError(
                    f"jobs {declaring} declare concurrency and the {self.driver.name} driver has no lease store; "
                    "give the driver a lease store, use one of the built-in drivers (postgres, sqlite, redis, "
                    "memory), or drop the declaration",
                    {"jobs": declaring, "driver": self.driver.name},
                )
        limited = sorted(h.name for h in handles if h.rate_limit is not None)
        if self.driver.rates is None and limited:
            raise RateLimitUnenforceableError(
                f"jobs {limited} declare a rate limit and the {self.driver.name} driver keeps no rate schedules; "
                "use one of the built-in drivers (postgres, sqlite, redis, memory), or drop the declaration",
                {"jobs": limited, "driver": self.driver.name},
            )
        served = {h.queue for h in handles}
        for queue in self.queues:
            if queue not in served:
                log_event(logging.INFO, "jobs.worker.queue-unregistered", queue=queue, worker_id=self.worker_id)
        self._drop = drop_exhausted_names()
        prime_counters(self.queues)
        fair = self.driver.fair_queues  # a fair queue's buffered jobs start in their orgs' turn, as it claims them
        self._pools = {
            q: SlotPool(self.slots[q], name=f"jobs-{q}", run=self._execute, lane=_lane if q in fair else None)
            for q in self.queues
        }
        self._async_waiting = {q: TurnQueue(_waiting_lane) if q in fair else deque() for q in self.queues}
        self._sync_served = frozenset(q for q in self.queues if q not in _only_async(handles))
        for queue in self._sync_served:  # a queue of both kinds starts small: see _adapt_async_ask
            self._async_ask[queue] = min(self.async_slots[queue], ASYNC_ASK_START)
        for queue in sorted({h.queue for h in handles if h.is_async} & set(self.queues)):
            if not self.async_slots[queue]:
                log_event(logging.WARNING, "jobs.worker.async-disabled", queue=queue, worker_id=self.worker_id)
        if any(self.async_slots.values()):
            self._lane = AsyncLane(name=f"jobs-async-{self.worker_id}", new_loop=self._new_loop)
            self._lane.start()
            self._watchdog = LoopWatchdog(self._lane, worker=self, stall_ms=self.loop_stall_ms)
            self._watchdog.start()
        self._started_ms = self.clock.now_ms()
        self._record_worker()
        if isinstance(self.clock, SystemClock):
            self._beat_thread = threading.Thread(target=self._beat_loop, name="jobs-heartbeat", daemon=True)
            self._beat_thread.start()
        self._timers.append(self.clock.every(self.heartbeat_interval_ms, self._heartbeat))
        if self.driver.supports_wake:
            self._unsubscribe = self.driver.subscribe(self._on_wake)
        log_event(
            logging.INFO,
            "jobs.worker.started",
            worker_id=self.worker_id,
            queues=self.queues,
            slots=self.slots,
            async_slots=self.async_slots,
        )

    def _on_accept(self, reason: str) -> dict[str, Any]:
        """Abort every held job's signal with ``X_DRAINING``, so a body that unwinds is interrupted — back
        to ready at once, the attempt uncounted — and hand buffered claims back when the close begins."""
        with self._cond:
            self._hand_back_on_close = True
            flights = list(self._flights.values())
        for flight in flights:
            flight.signal.abort(
                JobDrainedError(
                    f"worker {self.worker_id} is draining ({reason}); the job goes back to ready uncounted",
                    {"worker_id": self.worker_id, "signal": reason},
                )
            )
        return {"in_flight": len(flights)}

    def _busy(self) -> bool:
        return self._in_pass or bool(self._flights)

    def _before_wait(self) -> None:
        with self._cond:
            hand_back = self._hand_back_on_close
        if hand_back:
            self._hand_back_buffered()
            self._hand_back_kept()

    def _abandoned(self) -> dict[str, Any]:
        abandoned = [f.job.id for f in self._flights.values()]
        self.stats.abandoned += len(abandoned)
        return {"job_ids": abandoned}

    def _teardown(self, finished: bool) -> None:
        """Stop the timers and the wake, join the loop, shut the pools (waiting for their threads only
        when the jobs finished), flush the settle buffer, stop the heartbeat, leave the registry, close
        the driver."""
        self._wake.set()
        self._hand_back_kept()  # runs still kept (a close without a drain's accept) keep their instants
        with self._cond:
            timers = [*self._timers, *self._handbacks]
            self._handbacks.clear()
        for timer in timers:
            timer.cancel()
        if self._unsubscribe is not None:
            self._unsubscribe()
        self._join_loop()
        for pool in self._pools.values():
            pool.shutdown(wait=finished)
        self._stop_lane(finished)
        if not self._acks.close():
            log_event(logging.ERROR, "jobs.worker.settle-flush-timeout", worker_id=self.worker_id)
        self._beat_stop.set()
        self._beat_due.set()
        if self._beat_thread is not None:
            self._beat_thread.join(timeout=5)
        self.driver.remove_worker(self.worker_id)
        self.driver.close()

    def _stop_lane(self, finished: bool) -> None:
        """Stop the watchdog, then the event loop: when the jobs finished it has nothing left to run; when
        the drain gave up on some, their tasks are cancelled (their leases lapse, as for an abandoned
        thread's body). The stop is waited for :data:`LANE_STOP_S` at most, on a thread of its own: a body
        that holds the loop and ignores its cancel cannot keep the process alive (the loop's thread is a
        daemon, as the slots' are) — it is logged ``jobs.worker.loop-abandoned``."""
        if self._watchdog is not None:
            self._watchdog.stop()
        lane = self._lane
        if lane is None:
            return
        stopper = threading.Thread(
            target=partial(lane.stop, wait=finished, timeout=LANE_STOP_S), name="jobs-async-stop", daemon=True
        )
        stopper.start()
        stopper.join(LANE_STOP_S + 1)
        if stopper.is_alive():
            log_event(logging.ERROR, "jobs.worker.loop-abandoned", worker_id=self.worker_id, tasks=lane.running())

    # -- the claim loop ------------------------------------------------------------------------

    def _on_wake(self, queue: str) -> None:
        if queue in self.queues:
            self.kick()

    def _wake_is_live(self) -> bool:
        return self.driver.supports_listen and bool(self.driver.wake_is_live())

    def run_once(self) -> int:
        """One pass: ONE claim over every queue with room, each capped at its free slots plus its
        claim-ahead buffer. Answers how many jobs it dispatched."""
        return self._guarded_pass().done

    def _one_pass(self) -> Pass:
        with self._cond:
            if self._settling > self._settle_backlog():
                return Pass()  # the settle buffer is behind: claim again once it caught up (it kicks)
            rooms = {q: (self._sync_room(q), self._async_room(q)) for q in self.queues}
        free = {q: sync + other for q, (sync, other) in rooms.items() if sync + other > 0}
        if not free:
            return Pass()
        record = self._registry_row_due(after_ms=self.heartbeat_interval_ms)
        claimed = self.driver.claim(
            queues=list(free),
            limit=sum(free.values()),
            worker_id=self.worker_id,
            visibility_timeout_ms=self.visibility_timeout_ms,
            drop_exhausted=self._drop,
            queue_limits=free,
            record=record,
        )
        if record is not None:
            self._recorded_ms = record.heartbeat_at_ms
        if claimed.buried:
            announce_exhausted(claimed.buried, context=self.context)
        dispatched = self._dispatch_claimed(claimed.jobs, rooms)
        return Pass(done=dispatched, worked=dispatched > 0)

    def _settle_backlog(self) -> int:
        return SETTLE_BACKLOG_PER_SLOT * (sum(self.slots.values()) + sum(self.async_slots.values()))

    def _sync_room(self, queue: str) -> int:
        """The thread room a claim asks for (caller holds the lock): none on a queue only async jobs name."""
        return self._room(queue) if queue in self._sync_served else 0

    def _async_room(self, queue: str) -> int:
        """The async room a claim asks for (caller holds the lock): the free async slots plus the claim-ahead
        buffer (a quarter of the slots while the queue's runs are short), taken in batches once half the
        slots are busy, and capped on a queue of both kinds by what recent claims there used
        (:meth:`_adapt_async_ask`)."""
        slots, busy, waiting = self.async_slots[queue], self._async_busy[queue], len(self._async_waiting[queue])
        ahead = slots // ASYNC_AHEAD_DIVISOR if self._avg_ms[queue] < ASYNC_AHEAD_SHORT_JOB_MS else 0
        room = slots + ahead - busy - waiting
        if busy >= slots and room * 2 < ahead:
            return 0  # refill the buffer once half of it started: a claim takes many rows, not one per ended run
        if busy * 2 >= slots and room < slots // ASYNC_CLAIM_BATCH_DIVISOR:
            return 0  # long runs (no buffer): while half the slots are busy, claim a batch at a time, not a row
        if queue in self._sync_served:  # a queue of both kinds: capped by what recent claims there used
            room = min(room, self._async_ask[queue])
        return max(0, room)

    def _dispatch_claimed(self, jobs: Sequence[ClaimedJob], rooms: Mapping[str, tuple[int, int]]) -> int:
        """Dispatch one claim's rows by the kind of their job: an async one to the event loop, a sync one
        to its queue's threads — up to the thread room the claim asked for. A sync row past that room
        came in on async capacity: it goes back to ready at once, uncounted, rather than wait in this
        worker behind busy threads while another worker has one free. Answers how many were dispatched."""
        sync_taken: dict[str, int] = {}
        returned: dict[str, int] = {}
        async_taken: dict[str, int] = {}
        to_loop: list[tuple[InFlight, JobHandle[Any, Any]]] = []
        dispatched = 0
        for job in round_by_round(jobs, self._fair_lane):
            handle = registry.lookup(job.name)
            if isinstance(handle, JobHandle) and handle.is_async:
                async_taken[job.queue] = async_taken.get(job.queue, 0) + 1
                dispatched += self._dispatch(job, handle, to_loop)
                continue
            if isinstance(handle, JobHandle) and sync_taken.get(job.queue, 0) >= rooms[job.queue][0]:
                returned[job.queue] = returned.get(job.queue, 0) + 1
                self._return(job)
                with self._cond:  # a sync job enqueued onto an async-only queue: ask for threads there too
                    self._sync_served |= {job.queue}
                continue
            sync_taken[job.queue] = sync_taken.get(job.queue, 0) + 1
            dispatched += self._dispatch(job, None, to_loop)
        if to_loop:
            dispatched -= self._start_async(to_loop)
        for queue, (_, asked) in rooms.items():
            if asked:
                used, back = async_taken.get(queue, 0), returned.get(queue, 0)
                self._adapt_async_ask(queue, asked=asked, used=used, returned=back)
        return dispatched

    def _fair_lane(self, job: ClaimedJob) -> str | None:
        """A claimed row's lane when its queue is fair (its org, ``""`` for none), else ``None``."""
        return (job.tenant_id or "") if job.queue in self.driver.fair_queues else None

    def _adapt_async_ask(self, queue: str, *, asked: int, used: int, returned: int) -> None:
        """A queue of both kinds: the async room a claim asks for halves whenever sync rows came back on
        it (they were handed back), and doubles — up to the queue's async slots — whenever async rows
        filled it. A sync backlog thus costs a few hand-backs, not one per async slot every pass."""
        with self._cond:
            if returned:
                self._async_ask[queue] = max(1, asked // 2)
            elif used >= asked:
                self._async_ask[queue] = min(self.async_slots[queue], max(1, self._async_ask[queue]) * 2)

    def _return(self, job: ClaimedJob) -> None:
        """Hand a claimed sync row that has no thread room back to ready at once, uncounted."""
        self.stats.claimed += 1
        self.stats.returned += 1
        options = NackOptions(count_attempt=False, run_at_ms=self.clock.now_ms())
        try:
            self.driver.nack(job.id, job.ref, options)
        except Exception as exc:  # the lease lapses and the queue redelivers
            log_event(logging.ERROR, "jobs.worker.hand-back-failed", error=repr(exc), job_id=job.id)

    def _room(self, queue: str) -> int:
        """How many jobs a claim takes for ``queue`` now (caller holds the lock): free slots, plus the
        claim-ahead buffer while the queue's jobs are short. While every slot is busy the buffer is
        refilled only once half of it has drained, so a claim takes many rows, not one per finished job
        (its round trip costs the same either way)."""
        busy, slots = self._occupied[queue], self.slots[queue]
        ahead = self.claim_ahead[queue] if self._avg_ms[queue] < CLAIM_AHEAD_SHORT_JOB_MS else 0
        room = slots + ahead - busy
        if busy >= slots and room * 2 < ahead:
            return 0
        return room

    def _dispatch(
        self, job: ClaimedJob, handle: JobHandle[Any, Any] | None, to_loop: list[tuple[InFlight, JobHandle[Any, Any]]]
    ) -> int:
        """Hand a claimed job to its slot: an async job (``handle``) into ``to_loop``, the claim's rows for the
        event loop (:meth:`_start_async`); a sync one
        to its queue's threads, where a free thread starts it or it waits in the claim-ahead buffer (its
        lease renewed with the others') until one frees. A job over a process-local limit is shed: back to
        the queue uncounted, due after one poll. Answers 1 when dispatched."""
        self.stats.claimed += 1
        if not self._limiter.admit(queue=job.queue, tenant_id=job.tenant_id):
            self.stats.shed += 1
            options = NackOptions(count_attempt=False, run_at_ms=self.clock.now_ms() + self.poll_interval_ms)
            self.driver.nack(job.id, job.ref, options)
            log_event(logging.DEBUG, "jobs.worker.shed", job_id=job.id, name=job.name, queue=job.queue)
            return 0
        flight = InFlight(job=job, signal=CancelSignal(), last_renewed_ms=self.clock.now_ms())
        with self._cond:
            if not self._accepting:
                flight.signal.abort(
                    JobDrainedError(f"worker {self.worker_id} is draining", {"worker_id": self.worker_id})
                )
            self._flights[job.claim] = flight
            if handle is None:
                self._occupied[job.queue] += 1
        if handle is None:
            self._pools[job.queue].submit(flight)
            return 1
        to_loop.append((flight, handle))  # started with the rest of the claim's async rows: one wake of the loop
        return 1

    def _start_async(self, batch: list[tuple[InFlight, JobHandle[Any, Any]]]) -> int:
        """Start a claim's async rows on the event loop in one hand-over, up to the free async slots; the rest
        wait in the claim-ahead buffer, and a run that ends starts the next (:meth:`_async_slot_freed`). A row the
        loop cannot take (the lane stopped, or its queue has no async concurrency here) goes back to ready,
        uncounted. Answers how many went back."""
        lane = self._lane
        runs: list[_Waiting] = []
        refused: list[tuple[InFlight, Exception]] = []
        with self._cond:
            for flight, handle in batch:
                queue = flight.job.queue
                if lane is None or not self.async_slots[queue]:
                    error = RuntimeError(f"queue {queue} runs no async job here (its async concurrency is 0)")
                    refused.append((flight, error))
                    continue
                waiting = _Waiting(flight, handle, contextvars.copy_context())
                if self._async_busy[queue] < self.async_slots[queue]:
                    self._async_busy[queue] += 1
                    runs.append(waiting)
                else:
                    self._async_waiting[queue].append(waiting)
        if runs:
            assert lane is not None
            try:
                lane.spawn_many([(partial(self._execute_async, lane, w.flight, w.handle), w.context) for w in runs])
            except Exception as stopped:  # the loop stopped under the claim: back to ready, uncounted
                with self._cond:
                    for w in runs:
                        self._async_busy[w.flight.job.queue] -= 1
                refused += [(w.flight, stopped) for w in runs]
        for flight, why in refused:
            job = flight.job
            log_event(logging.WARNING, "jobs.worker.async-refused", error=repr(why), **flight.fields())
            self._limiter.release(queue=job.queue, tenant_id=job.tenant_id)
            # no loop at all (async concurrency 0 here): offer it again later, to a worker that runs it
            self._return_flight(flight, after_ms=0 if self.async_slots[job.queue] else ASYNC_REFUSED_RECHECK_MS)
        return len(refused)

    def _async_slot_freed(
        self, flight: InFlight, execution: JobExecution | None, lane: AsyncLane, *, kept: bool = False
    ) -> None:
        """On the loop, as an async run ends: :meth:`_slot_freed` for the loop's slot, then start the next row
        waiting in the claim-ahead buffer (unless a drain is handing the buffer back) — all under one take of
        the lock — and ask for a claim only once one would take rows (:meth:`_async_room`), not per ended run.
        A ``kept`` run only leaves its slot: its flight stays (:meth:`_keep`)."""
        queue = flight.job.queue
        completion = execution.completion if execution is not None else None
        with self._cond:
            self._async_busy[queue] -= 1
            if completion is not None:
                self._settling += 1
            waiting = None
            if self._async_waiting[queue] and not self._hand_back_on_close:
                waiting = self._async_waiting[queue].popleft()
                self._async_busy[queue] += 1
            claim = self._async_room(queue) > 0
        if completion is None:
            if not kept:
                self._finish(flight, execution)
        else:
            assert execution is not None
            self._acks.ack_later(completion, then=partial(self._settled, flight, execution))
        if waiting is not None:
            try:
                lane.spawn_here(partial(self._execute_async, lane, waiting.flight, waiting.handle), waiting.context)
            except Exception:  # the lane stopped: the row stays in the buffer, which the teardown hands back
                with self._cond:
                    self._async_busy[queue] -= 1
                    self._async_waiting[queue].appendleft(waiting)
        if claim:
            self.kick()

    def _execute(self, flight: InFlight) -> None:
        job = flight.job
        execution: JobExecution | None = None
        flight.slot_alive = threading.current_thread().is_alive
        try:  # the connection was checked after this thread's last job (and a new thread has none)
            execution = execute_job(job, self._env, signal=flight.signal, hooks=hooks_for(flight, self._may_keep))
        except Exception as exc:  # a driver fault in the settle: the lease lapses and the queue redelivers
            log_event(logging.ERROR, "jobs.worker.execute-failed", error=repr(exc), job_id=job.id, name=job.name)
        except BaseException as exc:  # job code around the body (the body's own is a failure): the slot lives on
            give_back(self, flight, "job code raised a BaseException outside the body", error=repr(exc))
        finally:
            flight.slot_alive = None
            release_stale_connections()
            if not flight.slot_dead:
                self._limiter.release(queue=job.queue, tenant_id=job.tenant_id)
        if flight.slot_dead:  # given back by the heartbeat, its slot counted free there
            return
        if execution is not None and execution.kept_until_ms is not None:
            self._keep(flight, execution.kept_until_ms)
            return
        self._slot_freed(flight, execution, self._occupied)

    # -- runs kept off their slot until the instant their rate limit reserved ------------------------------

    def _may_keep(self, flight: InFlight) -> bool:
        """Whether this worker keeps ``flight`` until its reserved instant: not while draining, and not past
        :data:`KEPT_PER_SLOT` runs kept for its queue (it is handed back instead)."""
        queue = flight.job.queue
        with self._cond:
            if self._hand_back_on_close or not self._accepting:
                return False
            kept = sum(1 for k in self._kept.values() if k.flight.job.queue == queue)
            return kept < KEPT_PER_SLOT * self.slots[queue]

    def _keep(self, flight: InFlight, until_ms: int, *, handle: JobHandle[Any, Any] | None = None) -> None:
        """The run left its slot — a thread's, or the loop's for an async run (``handle``), whose slot its end
        already freed — to wait for ``until_ms``: bring it back to a slot ahead of the claim-ahead buffer
        :data:`~ultimate_jobs.core.rates.RATE_HOLD_MS` ``// 2`` before the instant (it waits out the rest in
        the slot). Its lease is renewed with the others' meanwhile."""
        kept = _Kept(flight, until_ms, handle)
        self.stats.kept += 1
        with self._cond:
            if handle is None:
                self._occupied[flight.job.queue] -= 1
            hand_back = self._hand_back_on_close
            if not hand_back:
                self._kept[flight.job.claim] = kept
        if hand_back:  # a drain began while it took its instant
            self._kept_back(kept)
        else:
            timer = self.clock.call_at(until_ms - RATE_HOLD_MS // 2, partial(self._rejoin, flight.job.claim))
            with self._cond:
                if flight.job.claim in self._kept:
                    kept.timer = timer
        self.kick()  # its slot is free: refill it

    def _rejoin(self, claim: str) -> None:
        """A kept run's time has come: back to a slot, ahead of the buffer — or back to the queue when the worker
        is draining, a process-local limit refuses it now, or its pool or loop has stopped."""
        with self._cond:
            kept = self._kept.pop(claim, None)
            if kept is None:  # a drain handed it back
                return
            draining = self._hand_back_on_close
        job = kept.flight.job
        if not draining and self._limiter.admit(queue=job.queue, tenant_id=job.tenant_id):
            if self._back_to_slot(kept):
                return
            self._limiter.release(queue=job.queue, tenant_id=job.tenant_id)
        self._kept_back(kept)

    def _back_to_slot(self, kept: _Kept) -> bool:
        """Put a kept run first in line: its queue's threads (:meth:`SlotPool.submit_first`), or the loop — at
        once when an async slot is free, else first in the async claim-ahead buffer. ``False`` when the pool or
        the loop has stopped."""
        flight, handle, queue = kept.flight, kept.handle, kept.flight.job.queue
        if handle is None:
            with self._cond:
                self._occupied[queue] += 1
            try:
                self._pools[queue].submit_first(flight)
                return True
            except RuntimeError:  # the pool shut under it
                with self._cond:
                    self._occupied[queue] -= 1
                return False
        lane = self._lane
        if lane is None:
            return False
        waiting = _Waiting(flight, handle, contextvars.copy_context())
        with self._cond:
            if self._async_busy[queue] >= self.async_slots[queue]:
                self._async_waiting[queue].appendleft(waiting)
                return True
            self._async_busy[queue] += 1
        try:
            lane.spawn_many([(partial(self._execute_async, lane, flight, handle), waiting.context)])
            return True
        except Exception:  # the loop stopped
            with self._cond:
                self._async_busy[queue] -= 1
            return False

    def _hand_back_kept(self) -> None:
        """A drain's hand-back of every kept run: due just ahead of its instant, which it keeps."""
        with self._cond:
            kept = list(self._kept.values())
            self._kept.clear()
        for k in kept:
            if k.timer is not None:
                k.timer.cancel()
            self._kept_back(k)

    def _kept_back(self, kept: _Kept) -> None:
        """Hand a kept run back to the queue, uncounted, due :data:`~ultimate_jobs.core.rates.RATE_LEAD_MS`
        before its reserved instant (the reservation holds for whichever worker claims it then)."""
        flight, now = kept.flight, self.clock.now_ms()
        options = NackOptions(count_attempt=False, run_at_ms=max(now, kept.until_ms - RATE_LEAD_MS))
        try:
            self.driver.nack(flight.job.id, flight.job.ref, options)
        except Exception as exc:  # the lease lapses and the queue redelivers
            log_event(logging.ERROR, "jobs.worker.hand-back-failed", error=repr(exc), job_id=flight.job.id)
        log_event(logging.DEBUG, "jobs.job.rate-limited", wait_ms=max(0, kept.until_ms - now), **flight.fields())
        self._finish(flight, None)

    async def _execute_async(self, lane: AsyncLane, flight: InFlight, handle: JobHandle[Any, Any]) -> None:
        """One async attempt, as a task on the event loop: the executor offloads every driver call, so
        this task never blocks the loop on the database. A task cancelled under it (the lane stopping past
        the drain deadline) still frees its slot; its row's lease lapses, as an abandoned thread's does."""
        job = flight.job
        execution: JobExecution | None = None
        flight.slot_alive, flight.on_loop = lane.is_alive, True
        try:
            execution = await execute_job_async(
                job, self._env, lane=lane, signal=flight.signal, hooks=hooks_for(flight, self._may_keep), handle=handle
            )
        except Exception as exc:  # a driver fault in the settle: the lease lapses and the queue redelivers
            log_event(logging.ERROR, "jobs.worker.execute-failed", error=repr(exc), job_id=job.id, name=job.name)
        except asyncio.CancelledError:
            raise  # the lane is stopping past the drain deadline: the lease lapses
        except BaseException as exc:  # job code around the body, caught before the loop would see it
            give_back(self, flight, "job code raised a BaseException outside the body", error=repr(exc))
        finally:
            flight.slot_alive = None
            kept_until = execution.kept_until_ms if execution is not None else None
            if not flight.slot_dead:  # else given back by the heartbeat, its slot counted free there
                self._limiter.release(queue=job.queue, tenant_id=job.tenant_id)
                self._async_slot_freed(flight, execution, lane, kept=kept_until is not None)
        if kept_until is not None and not flight.slot_dead:
            self._keep(flight, kept_until, handle=handle)

    def _slot_freed(self, flight: InFlight, execution: JobExecution | None, busy: dict[str, int]) -> None:
        """The attempt left its slot (a thread's, or the loop's: ``busy`` is that kind's count); a completion
        left to the settle buffer keeps its flight (and lease) until it lands."""
        queue = flight.job.queue
        if execution is None or execution.completion is None:
            with self._cond:
                busy[queue] -= 1
            self._finish(flight, execution)
        else:
            with self._cond:
                busy[queue] -= 1
                self._settling += 1
            self._acks.ack_later(execution.completion, then=partial(self._settled, flight, execution))
        self.kick()  # a slot came free: refill it at once

    def _settled(self, flight: InFlight, execution: JobExecution, landed: bool, error: BaseException | None) -> None:
        """The settle buffer's answer for a completion the slot left to it (on the flusher's thread)."""
        completion_settled(flight.job, execution, landed, error)
        with self._cond:
            self._settling -= 1
            backlog = self._settling
        self._finish(flight, execution)
        if backlog == self._settle_backlog():
            self.kick()  # the claim loop may have paused for the backlog

    def slot_died(self, flight: InFlight) -> None:
        """The heartbeat found ``flight``'s slot dead (its thread ended, or the event loop's) while the slot
        still held it: give its lease back (:func:`~.inflight.give_back`), free the slot's count and end the
        flight — nobody will settle it here."""
        give_back(self, flight, "its slot is no longer alive")
        with self._cond:
            flight.slot_dead = True
            busy = self._async_busy if flight.on_loop else self._occupied
            busy[flight.job.queue] -= 1
        self._limiter.release(queue=flight.job.queue, tenant_id=flight.job.tenant_id)
        self._finish(flight, None)
        self.kick()

    def _finish(self, flight: InFlight, execution: JobExecution | None) -> None:
        """Count the attempt, then let the flight go: whoever waits on the flights (``wait_idle``, a
        drain) sees the stats, the metrics and the hand-back timer already moved."""
        if execution is not None:
            self._account(execution)
        with self._cond:
            self._flights.pop(flight.job.claim, None)
            if execution is not None:
                self.executions.append(execution)
            self._cond.notify_all()

    def _hand_back_buffered(self) -> None:
        """A drain's hand-back: claimed jobs still waiting in the claim-ahead buffer go back to ready at
        once, the attempt uncounted (like an interrupted one); they never started."""
        for pool in self._pools.values():
            for flight in pool.take_queued():
                self._limiter.release(queue=flight.job.queue, tenant_id=flight.job.tenant_id)
                with self._cond:
                    self._occupied[flight.job.queue] -= 1
                self._return_flight(flight)
        with self._cond:
            waiting = [w for queue in self._async_waiting.values() for w in queue]
            for queue in self._async_waiting.values():
                queue.clear()
        for w in waiting:
            self._limiter.release(queue=w.flight.job.queue, tenant_id=w.flight.job.tenant_id)
            self._return_flight(w.flight)

    def _return_flight(self, flight: InFlight, *, after_ms: int = 0) -> None:
        """A dispatched job that never started goes back to ready — at once, or due ``after_ms`` from now —
        uncounted (as an interrupted one), carrying its signal's reason; the flight ends."""
        job = flight.job
        reason = flight.signal.reason
        options = NackOptions(
            error=None if reason is None else reason.message,
            code=None if reason is None else reason.code,
            count_attempt=False,
            run_at_ms=self.clock.now_ms() + after_ms,
        )
        try:
            self.driver.nack(job.id, job.ref, options)
        except Exception as exc:  # the lease lapses and the queue redelivers
            log_event(logging.ERROR, "jobs.worker.hand-back-failed", error=repr(exc), job_id=job.id)
        self.stats.interrupted += 1
        self._finish(flight, None)

    def _account(self, execution: JobExecution) -> None:
        stat = _STAT_BY_OUTCOME.get(execution.outcome or "")
        if stat is not None:
            setattr(self.stats, stat, getattr(self.stats, stat) + 1)
        if execution.abandoned:
            self.stats.abandoned += 1
        count_outcome(execution.queue, execution.outcome)
        if execution.queue in self._avg_ms:  # a moving average over roughly the last 20 attempts
            self._avg_ms[execution.queue] += (execution.duration_ms - self._avg_ms[execution.queue]) / 20
        resume = execution.resume_at_ms
        if resume is not None and resume - self.clock.now_ms() <= HANDBACK_TIMER_WINDOW_MS:
            self._arm_handback(resume)

    def _arm_handback(self, at_ms: int) -> None:
        """A pass when a handed-back row comes due; the timer forgets itself once fired (no growth)."""
        armed: list[Timer] = []
        fired = threading.Event()

        def fire() -> None:
            with self._cond:
                fired.set()
                self._handbacks.difference_update(armed)
            self.kick()

        timer = self.clock.call_at(at_ms, fire)
        with self._cond:
            if fired.is_set():  # a wall clock may fire a due timer before this line
                return
            if self.state != "stopped":
                armed.append(timer)
                self._handbacks.add(timer)
                return
        timer.cancel()

    # -- heartbeat and registry ----------------------------------------------------------------

    def in_flight(self) -> list[InFlight]:
        """The attempts this worker holds right now."""
        with self._cond:
            return list(self._flights.values())

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Block until no attempt is in flight (tests); answers whether that happened in ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._flights, timeout)


@dataclass(slots=True)
class _Kept:
    """A run kept off its slot until ``until_ms``, the instant its rate limit reserved for it."""

    flight: InFlight
    until_ms: int
    handle: JobHandle[Any, Any] | None = None  # an async run's declaration (None: a sync run)
    timer: Timer | None = None


class _Waiting(NamedTuple):
    """A claimed async row in the claim-ahead buffer: its flight, its job, and the context it runs in."""

    flight: InFlight
    handle: JobHandle[Any, Any]
    context: contextvars.Context


def _only_async(handles: Sequence[JobHandle[Any, Any]]) -> frozenset[str]:
    """The queues every registered job of which is ``async def`` — and that no ``django.tasks`` backend
    serves: a claim there asks for async room only."""
    kinds: dict[str, set[bool]] = {}
    for handle in handles:
        kinds.setdefault(handle.queue, set()).add(handle.is_async)
    return frozenset(q for q, k in kinds.items() if k == {True}) - registry.source_queues()


def _lane(flight: InFlight) -> str:
    """A buffered job's lane in a fair queue: its org (``""`` for none), as the driver files its row."""
    return flight.job.tenant_id or ""


def _waiting_lane(waiting: _Waiting) -> str:
    """A buffered async job's lane in a fair queue (:func:`_lane`)."""
    return _lane(waiting.flight)
