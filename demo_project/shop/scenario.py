"""The demo shop's scenario, end to end in one process: seed orders, enqueue the shop's jobs, drive
them with :func:`ultimate_jobs.testing.run_jobs` on the demo database's driver (SQLite by default, Postgres
on a PostgreSQL ``DATABASE_URL``) and a frozen clock, and answer
what happened to each job. Deterministic: the clock starts at a fixed instant, the outages are
scripted and the retry jitter is seeded — only the minted job ids differ from run to run.

The ``shop_demo`` management command runs this and prints the answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ultimate_jobs import JobExecution, JobHandle, job_worker, set_event_bus, set_job_clock, set_job_driver
from ultimate_jobs.contracts.jobs import StepRecord
from ultimate_jobs.contracts.operator import JobFilter, JobRecord
from ultimate_jobs.contracts.series import CounterTotals
from ultimate_jobs.core.durations import format_duration
from ultimate_jobs.drivers.memory.events import MemoryEventBus
from ultimate_jobs.events import reset_event_bus
from ultimate_jobs.models import Job, JobCounter, JobLease, JobStep, PausedQueue, PausedTask, TaskFire, Worker
from ultimate_jobs.testing import FrozenClock, run_jobs

from .backend import DemoDriver, clear_redis_store, demo_driver, on_redis
from .jobs import (
    book_shipment,
    daily_sales_report,
    fulfil_order,
    issue_refund,
    settle_payouts,
    sync_account,
    sync_inventory,
)
from .models import Order
from .services import HANG_LIMIT_SECONDS, Carrier, Mailer, ShopServices, Warehouse

DEMO_ORGS = ("org-acme", "org-globex")
STARTS_AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)  # a Monday morning
ORDER_GAP_MS = 60_000  # the shop's checkouts enqueue one minute apart


@dataclass(frozen=True, slots=True)
class JobLine:
    """One row of the demo's table: how one job ended and how it got there."""

    name: str
    job_id: str
    state: str
    attempts: int
    max_attempts: int
    outcomes: tuple[str, ...]
    note: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead-lettered job: the first line of its last error and the executor's verdict."""

    name: str
    job_id: str
    attempts: int
    max_attempts: int
    error: str
    verdict: str


@dataclass(frozen=True, slots=True)
class OrderLine:
    """An order row as the run left it."""

    org_id: str
    number: str
    status: str
    charged: bool
    charges: int
    emailed: int


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """Everything the command prints."""

    jobs: tuple[JobLine, ...]
    dedupe: str
    orders: tuple[OrderLine, ...]
    counters: tuple[CounterTotals, ...]
    dead_letters: tuple[DeadLetter, ...]
    pages: tuple[str, ...]
    events: tuple[str, ...]
    started_ms: int
    ended_ms: int
    seed: int


@dataclass(slots=True)
class _Facts:
    """What a note is written from: the job's row, its attempts, its steps and the shop afterwards."""

    record: JobRecord
    executions: list[JobExecution]
    steps: dict[str, StepRecord]
    orders: dict[str, Order]
    worker_up_ms: int

    @property
    def result(self) -> Any:
        last = self.executions[-1] if self.executions else None
        return last.result if last is not None else None

    def failed_attempts(self) -> list[JobExecution]:
        return [e for e in self.executions if e.outcome in ("retried", "dead-lettered", "dropped")]

    def retry_waits(self) -> list[int]:
        """How long each retry waited after its failed attempt. On the frozen clock an attempt takes no
        time and each one starts exactly when it was due: the first when the worker came up, every
        later one at the previous attempt's ``resume_at_ms``."""
        waits, at = [], self.worker_up_ms
        for execution in self.executions:
            if execution.resume_at_ms is None:
                break
            if execution.outcome == "retried":
                waits.append(execution.resume_at_ms - at)
            at = execution.resume_at_ms
        return waits


# -- installing the in-process runtime ------------------------------------------------------------


@contextmanager
def installed(clock: FrozenClock, driver: DemoDriver) -> Iterator[None]:
    """Install ``clock``, ``driver`` and a memory event bus process-wide for the block, then put the
    defaults back (``set_job_driver(None)`` rebuilds from settings on next use)."""
    set_job_clock(clock)
    set_job_driver(driver)
    set_event_bus(MemoryEventBus(clock))
    try:
        yield
    finally:
        set_job_driver(None)
        set_job_clock(None)
        reset_event_bus()


class _EventLog(logging.Handler):
    """Keeps the library's log events (``jobs.attempt.failed``, …) stamped with the frozen clock's
    offset from the start, so the command can print them (``-v 2``) instead of stderr showing them."""

    FIELDS = ("name", "attempt", "outcome", "code", "stop", "step")

    def __init__(self, clock: FrozenClock) -> None:
        super().__init__(logging.INFO)
        self.clock = clock
        self.start = clock.now_ms()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields: dict[str, Any] = getattr(record, "jobs", {}) or {}
        facts = " ".join(f"{k}={fields[k]}" for k in self.FIELDS if fields.get(k) is not None)
        offset = _offset(self.clock.now_ms() - self.start)
        self.lines.append(f"+{offset:<12} {record.getMessage():<22} {facts}")


@contextmanager
def captured_events(clock: FrozenClock) -> Iterator[_EventLog]:
    """Collect the ``ultimate_jobs`` logger's INFO+ events for the block."""
    logger = logging.getLogger("ultimate_jobs")
    handler = _EventLog(clock)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# -- the scenario ----------------------------------------------------------------------------------


def clear_queue() -> None:
    """Start from an empty queue: the demo database is the demo's own, so a second run repeats the first."""
    if on_redis():
        clear_redis_store()
        return
    for model in (Job, JobStep, JobLease, JobCounter, Worker, PausedQueue, PausedTask, TaskFire):
        model.objects.all().delete()


def seed_orders() -> None:
    """Forget the previous demo's orders and place this one's."""
    Order.objects.filter(org_id__in=DEMO_ORGS).delete()
    Order.objects.create(org_id="org-acme", number="1001", total_cents=4_250)
    Order.objects.create(org_id="org-acme", number="1002", total_cents=1_999)
    Order.objects.create(
        org_id="org-globex", number="2001", total_cents=8_900, status=Order.Status.PAID, charged=True, charges=1
    )


def run_scenario(*, seed: int = 0) -> ScenarioResult:
    """Run the whole scenario and answer what happened. Writes ``Order`` rows in the default database."""
    clock = FrozenClock(start_ms=int(STARTS_AT.timestamp() * 1000))
    driver = demo_driver(clock)  # every statement takes the frozen clock's now
    clear_queue()
    shop = ShopServices(
        mailer=Mailer(outages=1),  # the first email fails with X_MAIL_TEMPORARY
        carrier=Carrier(timeouts=2),  # the carrier times out twice
        warehouse=Warehouse(down=frozenset({"wh-east"})),  # wh-east answers 503 all week
    )
    started = clock.now_ms()
    with installed(clock, driver), captured_events(clock) as events:
        seed_orders()
        plan: list[tuple[JobHandle[Any, Any], dict[str, Any], dict[str, Any]]] = [
            (fulfil_order, {"org_id": "org-acme", "number": "1001"}, {}),
            (book_shipment, {"org_id": "org-globex", "number": "2001"}, {}),
            (sync_inventory, {"org_id": "org-acme", "warehouse": "wh-east"}, {}),
            (issue_refund, {"org_id": "org-acme", "number": "1002", "reason": "cancelled before payment"}, {}),
            (daily_sales_report, {"day": STARTS_AT.date().isoformat()}, {"delay": "10h"}),
        ]
        job_ids: list[str] = []
        for index, (handle, payload, options) in enumerate(plan):
            if index:
                clock.advance(ORDER_GAP_MS)
            job_ids.append(handle.enqueue(payload, **options).id)
        # The checkout's own retry enqueues the first order again: the live idempotency key answers.
        again = fulfil_order.enqueue({"org_id": "org-acme", "number": "1001"})
        dedupe = (
            f"fulfil_order enqueued twice for order 1001: the second answer was deduped={again.deduped} "
            f"with the {'same' if again.id == job_ids[0] else 'a different'} job id"
        )
        worker_up = clock.now_ms()
        report = run_jobs(driver, clock=clock, context=lambda: shop, seed=seed)
        worker_ids, worker_executions = run_worker_part(clock, driver, shop)

    orders = {o.number: o for o in Order.objects.filter(org_id__in=DEMO_ORGS).order_by("org_id", "number")}
    lines = []
    for (handle, _, _), job_id in zip(plan, job_ids, strict=True):
        name = handle.name
        record = driver.operator.get(job_id)
        if record is None:
            raise RuntimeError(f"the queue lost job {job_id} ({name})")
        executions = [e for e in report.executions if e.job_id == job_id]
        steps = {s.name: s for s in driver.operator.steps(job_id)}
        facts = _Facts(record, executions, steps, orders, worker_up)
        lines.append(
            JobLine(
                name=name,
                job_id=job_id,
                state=record.state,
                attempts=record.attempts,
                max_attempts=record.max_attempts,
                outcomes=tuple(e.outcome or "handed-back" for e in executions),
                note=NOTES[name](facts),
            )
        )
    for handle, job_id in worker_ids:
        record = driver.operator.get(job_id)
        if record is None:
            raise RuntimeError(f"the queue lost job {job_id} ({handle.name})")
        executions = [e for e in worker_executions if e.job_id == job_id]
        lines.append(
            JobLine(
                name=handle.name,
                job_id=job_id,
                state=record.state,
                attempts=record.attempts,
                max_attempts=record.max_attempts,
                outcomes=tuple(e.outcome or "handed-back" for e in executions),
                note=_worker_note(record, executions),
            )
        )
    dead = driver.operator.list(JobFilter(state="dead", limit=200)).rows
    return ScenarioResult(
        jobs=tuple(lines),
        dedupe=dedupe,
        orders=tuple(OrderLine(o.org_id, o.number, o.status, o.charged, o.charges, o.emailed) for o in orders.values()),
        counters=tuple(driver.operator.counter_totals(started)),
        dead_letters=tuple(sorted((_dead_letter(r) for r in dead), key=lambda d: d.name)),
        pages=tuple(shop.pages),
        events=tuple(events.lines),
        started_ms=started,
        ended_ms=clock.now_ms(),
        seed=seed,
    )


def run_worker_part(
    clock: FrozenClock, driver: DemoDriver, shop: ShopServices
) -> tuple[list[tuple[JobHandle[Any, Any], str]], list[JobExecution]]:
    """The same queue under a real worker (thread pools, heartbeat, deadlines) on the frozen clock:
    a payout batch stopped by its 30s timeout, and a second sync of one account refused while the
    first holds the account's concurrency key."""
    worker = job_worker(driver=driver, context=lambda: shop, clock=clock, concurrency=4, worker_id="demo-worker")
    worker.start(loop=False)  # the demo drives each claim pass itself
    try:
        payout = settle_payouts.enqueue({"org_id": "org-globex", "batch": "2026-01-08"}).id
        first = sync_account.enqueue({"org_id": "org-acme", "account_id": "acct-7", "request_id": "req-1"}).id
        worker.run_once()  # claims both; the bank hangs, the ledger holds acct-7
        shop.ledger.started.wait(HANG_LIMIT_SECONDS)
        second = sync_account.enqueue({"org_id": "org-acme", "account_id": "acct-7", "request_id": "req-2"}).id
        worker.run_once()  # acct-7 is busy: when_busy="fail" refuses the second run before its body starts
        _settled(driver, second)
        clock.advance(30_000)  # the payout's deadline: run.signal aborts, the attempt fails at once
        _settled(driver, payout)
        shop.ledger.gate.set()  # the first sync finishes
        worker.wait_idle(HANG_LIMIT_SECONDS)
    finally:
        worker.stop()
    handles: list[tuple[JobHandle[Any, Any], str]] = [
        (settle_payouts, payout),
        (sync_account, first),
        (sync_account, second),
    ]
    return handles, list(worker.executions)


def _settled(driver: DemoDriver, job_id: str) -> None:
    """Wait (bounded, real time) until a worker thread has settled ``job_id`` out of ``running``."""
    deadline = time.monotonic() + HANG_LIMIT_SECONDS
    while (record := driver.operator.get(job_id)) is not None and record.state == "running":
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} did not settle within {HANG_LIMIT_SECONDS}s")
        time.sleep(0.001)


def _worker_note(record: JobRecord, executions: list[JobExecution]) -> str:
    last = executions[-1] if executions else None
    if record.name == "settle_payouts":
        return (
            f"the bank hung; the 30s timeout aborted run.signal and failed the attempt ({last.code if last else '-'}), "
            "dead-lettered with its 1 attempt; on_settled paged on-call"
        )
    if last is not None and last.outcome == "refused":
        return (
            f"{last.code}: acct-7 was already syncing under its concurrency key (limit 1, when_busy='fail'); "
            "the body never ran, no retry, not a dead letter — driver.operator.requeue(id) re-queues it"
        )
    return "held acct-7's concurrency key for the whole sync; completed once the ledger answered"


def _dead_letter(record: JobRecord) -> DeadLetter:
    lines = (record.last_error or "").splitlines()
    verdict = next((line for line in reversed(lines) if line.startswith("[")), "")
    return DeadLetter(
        name=record.name,
        job_id=record.id,
        attempts=record.attempts,
        max_attempts=record.max_attempts,
        error=lines[0] if lines else "",
        verdict=verdict,
    )


def _offset(ms: int) -> str:
    """``3d 0h 4m 1s``: a span to the second, every unit shown (the event log lines up)."""
    seconds = ms // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    return f"{days}d {hours}h {minutes}m {seconds}s"


def _span(ms: int) -> str:
    """``2m 4s``: a span to the second, zero units left out."""
    parts = _offset(ms).split()
    return " ".join(p for p in parts if not p.startswith("0")) or "0s"


def _clock_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%a %H:%M")


# -- the notes: one sentence per job, written from what the run left behind ------------------------


def _fulfil_note(f: _Facts) -> str:
    order = f.orders["1001"]
    failed = f.failed_attempts()
    sleep = f.steps.get("sleep:3d")
    slept = format_duration(sleep.wake_at_ms - sleep.started_at_ms) if sleep and sleep.wake_at_ms else "?"
    receipt_attempt = f.executions[len(failed)].attempt if len(f.executions) > len(failed) else "?"
    return (
        f"charges={order.charges} (attempt {receipt_attempt} replayed 'charge' and 'mark-paid' from storage); "
        f"receipt failed {failed[0].code if failed else '-'} on attempt 1, sent on attempt {receipt_attempt}; "
        f"slept {slept} on the frozen clock, then the nudge; emails={order.emailed}; status={order.status}"
    )


def _shipment_note(f: _Facts) -> str:
    failed = f.failed_attempts()
    kinds = sorted({type(e.error).__name__ for e in failed if e.error is not None})
    label = (f.result or {}).get("label", "?")
    waits = ", ".join(_span(ms) for ms in f.retry_waits())
    return (
        f"carrier failed {len(failed)}x ({', '.join(kinds) or '-'}: unclassified, so the linear 30s backoff: "
        f"waited {waits}); label {label} booked on attempt {f.record.attempts}"
    )


def _inventory_note(f: _Facts) -> str:
    failed = f.failed_attempts()
    code = failed[-1].code if failed else "-"
    waits = ", ".join(_span(ms) for ms in f.retry_waits())
    return (
        f"{code} on all {len(failed)} attempts; retry-after: waited {waits} (the warehouse's 120s, "
        f"not the 1m backoff); on_settled paged on-call"
    )


def _refund_note(f: _Facts) -> str:
    failed = f.failed_attempts()
    last = failed[-1] if failed else None
    unspent = f.record.max_attempts - f.record.attempts
    return (
        f"{last.code if last else '-'} is terminal: stopped on attempt {f.record.attempts} "
        f"({last.stop_reason if last else '-'}), {unspent} attempts unspent; on_settled paged on-call"
    )


def _report_note(f: _Facts) -> str:
    result = f.result or {}
    ran = _clock_time(f.record.finished_at_ms) if f.record.finished_at_ms else "?"
    return (
        f"{result.get('orders', '?')} orders across {result.get('orgs', '?')} orgs counted inside "
        f"cross_tenant(); enqueued with delay='10h', ran {ran}"
    )


NOTES: dict[str, Callable[[_Facts], str]] = {
    "fulfil_order": _fulfil_note,
    "book_shipment": _shipment_note,
    "sync_inventory": _inventory_note,
    "issue_refund": _refund_note,
    "daily_sales_report": _report_note,
}
