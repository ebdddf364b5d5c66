"""A scripted hour for the dashboard tests (client and browser): receipts sent steadily, a failure spike
of card charges dead-lettered at once, a slow inventory sync, and reports that wait two minutes for a
worker (a slow queue), on the frozen clock — so every bucket's counts, run times and waits are exact.

>>> run = script_hour(env)
>>> run.spike_at_ms     # the minute the charges died in
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.conftest import AnyJobsEnv, Env
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.definition import JobHandle
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.testing import run_jobs

MINUTE = 60_000
RECEIPTS = 6  # one a minute from the script's first minute
CHARGES = 4  # all dead-lettered in one minute, ten minutes in
SYNCS = 2  # 900 ms each, twenty minutes in
SYNC_MS = 900
RECEIPT_MS = 20
REPORTS = 3  # the slow queue: enqueued 22 minutes in, started two minutes later, sampled waiting meanwhile
REPORT_WAIT_MS = 2 * 60_000


@dataclass(frozen=True)
class ScriptedHour:
    """The minutes (bucket starts) where each part of the script settled, and the charge job (its runs die)."""

    first_minute_ms: int
    spike_at_ms: int
    slow_at_ms: int
    late_at_ms: int
    charge: JobHandle[Any, Any]


def script_hour(env: AnyJobsEnv | Env[PostgresDriver]) -> ScriptedHour:
    """Run the script on ``env``'s driver and clock; the clock ends 25 minutes after it started."""

    @job(
        name="dash_build_report",
        queue="reports",
        idempotency_key=lambda i: f"report:{i['n']}",
        tenant=lambda i: "org-a",
    )
    def build_report(run: JobRun[Any]) -> None:
        env.clock.advance(RECEIPT_MS)

    @job(
        name="dash_send_receipt",
        queue="emails",
        idempotency_key=lambda i: f"receipt:{i['n']}",
        tenant=lambda i: "org-a",
    )
    def send_receipt(run: JobRun[Any]) -> None:
        env.clock.advance(RECEIPT_MS)

    @job(
        name="dash_charge_card",
        queue="payments",
        idempotency_key=lambda i: f"charge:{i['n']}",
        tenant=lambda i: "org-a",
        retry={"attempts": 1},
    )
    def charge_card(run: JobRun[Any]) -> None:
        raise RuntimeError("the gateway refused the capture")

    @job(
        name="dash_sync_inventory",
        queue="inventory",
        idempotency_key=lambda i: f"sync:{i['n']}",
        tenant=lambda i: "org-a",
    )
    def sync_inventory(run: JobRun[Any]) -> None:
        env.clock.advance(SYNC_MS)

    now = env.clock.now_ms()
    first = now - now % MINUTE
    env.clock.advance(first + 1_000 - now)  # one second into a minute: no settle crosses a bucket's edge
    for n in range(RECEIPTS):
        send_receipt.enqueue({"n": n})
        run_jobs(clock=env.clock, advance=False)
        env.clock.advance(MINUTE)
    env.clock.advance(first + 10 * MINUTE + 1_000 - env.clock.now_ms())
    for n in range(CHARGES):
        charge_card.enqueue({"n": n})
    run_jobs(clock=env.clock, advance=False)
    env.clock.advance(first + 20 * MINUTE + 1_000 - env.clock.now_ms())
    for n in range(SYNCS):
        sync_inventory.enqueue({"n": n})
    run_jobs(clock=env.clock, advance=False)
    env.clock.advance(first + 22 * MINUTE + 1_000 - env.clock.now_ms())
    for n in range(REPORTS):
        build_report.enqueue({"n": n})
    for _ in range(REPORT_WAIT_MS // MINUTE):  # no worker free for the reports queue: the rollup samples it
        env.clock.advance(MINUTE)
        env.driver.rollup_counters()
    run_jobs(clock=env.clock, advance=False)
    env.clock.advance(first + 25 * MINUTE - env.clock.now_ms())
    env.driver.rollup_counters()  # sampled again: nothing waiting
    return ScriptedHour(first, first + 10 * MINUTE, first + 20 * MINUTE, first + 24 * MINUTE, charge_card)
