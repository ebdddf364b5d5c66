"""``job_scheduler()``: fire every registered task's occurrences — one dispatch round at a time, on
the leader only, with each task's catch-up policy — and drain in two phases on SIGTERM/SIGINT.

One lifecycle and one loop, as the worker's (:class:`ultimate_jobs.runtime.polling.PollingRole`, with the idle
ceiling at the tick: a round every ``tick_interval``, busy or idle): :meth:`JobScheduler.start`,
:meth:`JobScheduler.stop`, :meth:`JobScheduler.drain` (accept → close) and :meth:`JobScheduler.run_once`
— one round — which tests drive directly on a frozen clock.

Everything it stores is the driver's: the lease (``driver.leader``), the watermarks and the fire
(``driver.scheduler_state``), the counter rollup (``driver.rollup_counters()``, or riding on a lease
renewal). An idle round reads no store and resolves no cron: while it leads, the scheduler holds every
task's watermark and next due instant in memory, loaded once when it starts leading. The only
statements of an idle minute are the lease renewals, one every third of the TTL (6 a minute at the
default 30 s), the once-a-minute counter rollup riding on one of them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..contracts.jobs import EnqueueRequest
from ..contracts.protocol import JobDriver, SchedulerStore
from ..contracts.schedules import Fire
from ..core import registry
from ..core.clock import Clock
from ..core.durations import Duration, parse_duration
from ..core.installed import job_clock
from ..core.logs import log_event
from ..errors import InvariantError, NotImplementedOnDriverError
from ..runtime.lifecycle import DEFAULT_DRAIN_DEADLINE_MS
from ..runtime.polling import Pass, PollingRole
from .catchup import plan_fires
from .leader import DEFAULT_LEASE_TTL_MS, Leader, lease_leader
from .task import TaskHandle

TICK_INTERVAL_MS = 1_000
PAUSE_RECHECK_MS = 5_000
FIRE_RETRY_MS = 5_000
ROLLUP_EVERY_MS = 60_000

_NEVER = 2**63 - 1


@dataclass(slots=True)
class SchedulerStats:
    """What this scheduler did since it started."""

    rounds: int = 0
    fires: int = 0
    paused: int = 0
    fenced: int = 0
    refused: int = 0
    failures: int = 0
    rollups: int = 0
    terms: int = 0


class JobScheduler(PollingRole):
    """A scheduler over ``driver``, its ``leader`` and its ``store`` (the driver's scheduler state unless
    another is given). Build it with :func:`job_scheduler`.

    >>> scheduler = job_scheduler(driver=driver, clock=clock, tasks=[nightly_digest])
    >>> scheduler.start(loop=False)
    >>> clock.advance(86_400_000); scheduler.run_once()     # one round: answers the occurrences fired
    1
    """

    event_prefix = "jobs.scheduler"

    def __init__(
        self,
        *,
        driver: JobDriver,
        leader: Leader,
        state: SchedulerStore,
        tasks: Sequence[TaskHandle] | None,
        clock: Clock,
        tick_interval_ms: int,
        drain_deadline_ms: int,
    ) -> None:
        self.driver = driver
        self.leader = leader
        self.store = state
        self.clock = clock
        self.tick_interval_ms = tick_interval_ms
        self.drain_deadline_ms = drain_deadline_ms
        self.stats = SchedulerStats()
        self._declared = tuple(tasks) if tasks is not None else None
        self._tasks: dict[str, TaskHandle] = {}
        self._watermarks: dict[str, int] | None = None  # held while leading; None = load at the next round
        self._due: dict[str, int] = {}  # the next instant each task is looked at
        self._earliest = _NEVER
        self._leading = False
        self._valid_until = 0
        self._next_ask = 0
        self._term: int | None = None
        self._next_rollup = 0
        # a round every tick whether or not it fired: the ceiling is the floor, so the wait never doubles
        self._init_polling(poll_interval_ms=tick_interval_ms, idle_poll_max_ms=tick_interval_ms)

    # -- what tests and the CLI read -----------------------------------------------------------

    @property
    def leading(self) -> bool:
        """Whether this scheduler held the lease at its last round."""
        return self._leading

    def watermarks(self) -> dict[str, int]:
        """The watermarks held in memory (empty while not leading)."""
        return dict(self._watermarks or {})

    def next_due(self) -> dict[str, int]:
        """When each task is next looked at (its next occurrence, or a pause/failure recheck)."""
        return dict(self._due)

    def tasks(self) -> list[TaskHandle]:
        """The tasks this scheduler fires: the declared list, or every registered task."""
        if self._declared is not None:
            return list(self._declared)
        return [h for h in registry.registered("task") if isinstance(h, TaskHandle)]

    # -- lifecycle -----------------------------------------------------------------------------

    def check_durable(self) -> None:
        """Refuse a leader or state that dies with the process over a driver whose own store outlives it
        (Postgres): two processes would both lead, and a redeploy would forget every watermark (catch-up
        would have nothing to measure from)."""
        own = self.driver.scheduler_state
        if own is not None and own.durable and not (self.leader.durable and self.store.durable):
            raise InvariantError(
                f"the scheduler is on the {self.driver.name!r} driver, whose scheduler state is durable, with "
                f"{'a leader' if not self.leader.durable else 'a state'} that exists for tests only; "
                "leave leader= and state= to job_scheduler() — it uses the driver's lease and watermarks "
                "(scheduler_from_settings() does)",
                {"leader_durable": self.leader.durable, "state_durable": self.store.durable},
            )

    # -- the lifecycle's hooks (ultimate_jobs.runtime.lifecycle.RoleLifecycle) ---------------------------

    def _ident(self) -> dict[str, Any]:
        return {"holder": self.leader.holder}

    def _before_run(self) -> None:
        self.check_durable()

    def _begin(self) -> None:
        log_event(
            logging.INFO,
            "jobs.scheduler.started",
            holder=self.leader.holder,
            tasks=[t.name for t in self.tasks()],
            durable=self.leader.durable and self.store.durable,
        )

    def _abandoned(self) -> dict[str, Any]:
        return {"kept_lease": True}

    def _teardown(self, finished: bool) -> None:
        """Hand the lease back — unless a round is still enqueueing past the deadline: then KEEP it.
        Promoting a standby onto an occurrence this node is mid-dispatch for is the double fire election
        exists to prevent; the lease row lapses on its own, and the round keeps its state."""
        if not finished:
            return
        self._join_loop()
        try:
            self.leader.release()
        except Exception as exc:  # the lease lapses on its own; a standby waits one TTL instead
            log_event(logging.WARNING, "jobs.scheduler.release-failed", holder=self.leader.holder, error=repr(exc))
        self._leading = False
        self._watermarks = None

    # -- one round -----------------------------------------------------------------------------
    # A round stops before its next fire once draining; close waits for the round in flight.

    def run_once(self) -> int:
        """One dispatch round — never two at once. Answers how many occurrences it fired."""
        return self._guarded_pass().done

    def _one_pass(self) -> Pass:
        fired = self._round(self.clock.now_ms())
        return Pass(done=fired, worked=fired > 0)

    def _round(self, now: int) -> int:
        self.stats.rounds += 1
        self._lead(now)
        if not self._leading:
            return 0
        if self._watermarks is None and not self._load(now):
            return 0
        if now < self._earliest:
            return 0  # the idle round: no store read, no cron resolved
        fired = 0
        for name in sorted((n for n, at in self._due.items() if at <= now), key=lambda n: (self._due[n], n)):
            if not self._accepting or self._watermarks is None:
                break
            fired += self._dispatch(self._tasks[name], now)
        self._earliest = min(self._due.values(), default=_NEVER)
        return fired

    def _lead(self, now: int) -> None:
        if now < self._next_ask:
            if self._leading and now >= self._valid_until:
                self._set_leading(False, now, why="renewal overdue")
            return
        self._next_ask = now + self.leader.renew_every_ms
        rollup = now >= self._next_rollup
        carrier = self._rollup_carrier() if rollup else None
        try:
            leading = carrier.acquire(rollup=True) if carrier is not None else self.leader.acquire()
        except Exception as exc:
            self._next_ask = now + self.tick_interval_ms  # ask again next round
            log_event(logging.WARNING, "jobs.scheduler.lease-failed", holder=self.leader.holder, error=repr(exc))
            if self._leading and now >= self._valid_until:
                self._set_leading(False, now, why="renewal failed")
            return
        if leading:
            # Act on the lease only while a renewal is still due before it could lapse elsewhere.
            self._valid_until = now + self.leader.ttl_ms - self.leader.renew_every_ms
            if self._term != self.leader.term:
                self._term = self.leader.term
                self.stats.terms += 1
                self._watermarks = None  # a new term: what another leader fired meanwhile is in the store
        self._set_leading(leading, now, why="lease")
        if leading and rollup:
            self._next_rollup = now + ROLLUP_EVERY_MS
            if carrier is None:
                self._rollup()
            self.stats.rollups += 1

    def _rollup_carrier(self) -> Leader | None:
        """The leader, when it carries this driver's rollup in its renewal (its lease is this driver's);
        else the rollup is ``driver.rollup_counters()``, a call of its own."""
        return self.leader if self.leader.carries_rollup_of(self.driver) else None

    def _rollup(self) -> None:
        try:
            self.driver.rollup_counters()
        except Exception as exc:
            log_event(logging.WARNING, "jobs.scheduler.rollup-failed", holder=self.leader.holder, error=repr(exc))

    def _set_leading(self, leading: bool, now: int, *, why: str) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if not leading:
            self._watermarks = None
            self._due.clear()
            self._earliest = _NEVER
        log_event(
            logging.INFO,
            "jobs.scheduler.leading" if leading else "jobs.scheduler.standby",
            holder=self.leader.holder,
            term=self.leader.term,
            why=why,
            at_ms=now,
        )

    def _load(self, now: int) -> bool:
        """Read every task's watermark once (arming new tasks at now) and resolve each next occurrence."""
        tasks = {t.name: t for t in self.tasks()}
        try:
            watermarks = self.store.load(list(tasks), now_ms=now)
        except Exception as exc:
            log_event(logging.WARNING, "jobs.scheduler.load-failed", holder=self.leader.holder, error=repr(exc))
            return False
        self._tasks = tasks
        self._watermarks = watermarks
        self._due = {name: task.next_run(watermarks[name]) for name, task in tasks.items()}
        self._earliest = min(self._due.values(), default=_NEVER)
        return True

    def _dispatch(self, task: TaskHandle, now: int) -> int:
        """Fire what ``task``'s catch-up policy says is due; each occurrence in its own fire."""
        assert self._watermarks is not None
        watermark = self._watermarks[task.name]
        fired = 0
        try:
            plans = plan_fires(
                task.schedule, policy=task.catch_up, max_catch_up=task.max_catch_up, watermark_ms=watermark, now_ms=now
            )
            for planned in plans:
                if not self._accepting:
                    break
                requests = self._admitted(task, planned.occurrence_ms, now)
                fire = Fire(task.name, watermark, planned.watermark_ms, planned.occurrence_ms, requests, now)
                result = self.store.fire(fire)
                if result.outcome == "paused":
                    self.stats.paused += 1
                    self._due[task.name] = now + PAUSE_RECHECK_MS  # the resume's latency
                    log_event(
                        logging.DEBUG, "jobs.scheduler.task-paused", task=task.name, occurrence_ms=planned.occurrence_ms
                    )
                    return fired
                if result.outcome == "fenced":
                    self.stats.fenced += 1
                    self._watermarks = None  # another scheduler fired it: reload at the next round
                    log_event(
                        logging.WARNING,
                        "jobs.scheduler.fenced",
                        task=task.name,
                        occurrence_ms=planned.occurrence_ms,
                        holder=self.leader.holder,
                    )
                    return fired
                watermark = planned.watermark_ms
                self._watermarks[task.name] = watermark
                fired += 1
                self.stats.fires += 1
                log_event(
                    logging.INFO,
                    "jobs.scheduler.fired",
                    task=task.name,
                    occurrence_ms=planned.occurrence_ms,
                    watermark_ms=watermark,
                    inserted=result.inserted,
                    catch_up=task.catch_up,
                )
        except Exception as exc:
            self.stats.failures += 1
            self._due[task.name] = now + FIRE_RETRY_MS
            log_event(logging.ERROR, "jobs.scheduler.fire-failed", task=task.name, error=repr(exc), exc_info=True)
            return fired
        self._due[task.name] = task.next_run(watermark)
        return fired

    def _admitted(self, task: TaskHandle, occurrence_ms: int, now: int) -> list[EnqueueRequest]:
        """The occurrence's requests that passed admission. A refused entry would be refused at every
        retry, so it is logged with its code and left out; the occurrence fires its other entries and
        the task moves on to its next occurrence."""
        requests, refused = task.admit(occurrence_ms, now_ms=now)
        for entry in refused:
            self.stats.refused += 1
            log_event(
                logging.ERROR,
                "jobs.scheduler.entry-refused",
                task=task.name,
                job=entry.job,
                entry=entry.index,
                occurrence_ms=occurrence_ms,
                code=entry.error.code,
                error=entry.error.message,
            )
        return requests


def job_scheduler(
    *,
    driver: JobDriver,
    leader: Leader | None = None,
    state: SchedulerStore | None = None,
    tasks: Sequence[TaskHandle] | None = None,
    clock: Clock | None = None,
    tick_interval: Duration = TICK_INTERVAL_MS,
    drain_deadline: Duration = DEFAULT_DRAIN_DEADLINE_MS,
) -> JobScheduler:
    """Build the scheduler role. ``driver`` is required; ``tasks`` defaults to every registered task.

    ``leader`` defaults to a lease in the driver's own lease store (:func:`lease_leader` over
    ``driver.leader``, 30 s TTL) and ``state`` to the driver's own watermarks (``driver.scheduler_state``):
    on Postgres both are rows, so every scheduler process against the database contends for one lease and
    a redeploy reads where the last one stopped. A driver with no scheduler state is ``X_NOT_IMPLEMENTED``.

    >>> scheduler = job_scheduler(driver=job_driver())
    >>> scheduler.run()        # blocks; SIGTERM drains
    """
    if driver is None:
        raise InvariantError("job_scheduler(driver=...) is required", {})
    tick_ms = parse_duration(tick_interval, field="tick_interval")
    if tick_ms <= 0:
        raise InvariantError(f"job_scheduler: tick_interval must be positive, got {tick_ms} ms", {})
    if tasks is not None and not all(isinstance(t, TaskHandle) for t in tasks):
        raise InvariantError("job_scheduler(tasks=...) takes TaskHandles (what @task returns)", {})
    chosen = clock or job_clock()
    store = state if state is not None else driver.scheduler_state
    if store is None:
        raise NotImplementedOnDriverError(
            f"driver {driver.name!r} declares scheduler_state=None (it stores no watermarks); run the scheduler "
            "on one of the built-in drivers (postgres, sqlite, redis, memory), or pass state= a SchedulerStore",
            {"driver": driver.name},
        )
    return JobScheduler(
        driver=driver,
        leader=leader if leader is not None else lease_leader(driver, ttl=DEFAULT_LEASE_TTL_MS, clock=chosen),
        state=store,
        tasks=tasks,
        clock=chosen,
        tick_interval_ms=tick_ms,
        drain_deadline_ms=parse_duration(drain_deadline, field="drain_deadline"),
    )
