"""The demo's limits part: a fair queue and the payment provider's rate limit.

org-acme's month-end batch puts twelve ``reconcile_payment`` jobs on the ``payments`` queue, then
org-globex asks for one. The queue is fair (``FAIR_QUEUES`` in the demo's settings), so org-globex's job is
in the very next claim instead of behind the batch; the job is held to ``PAYMENT_GATEWAY`` — 5 gateway
calls a second per org — so org-acme's twelve calls spread over more than two seconds, each run that found
the org's key busy handed back to an instant reserved for it, no attempt spent. ``run_limits_part()``
answers printable lines; the ``shop_demo`` command prints them after the other parts.

It runs on the demo database's driver (SQLite, Postgres or Redis) with a frozen job clock, in this process
(``run_jobs``, whose frozen clock jumps to each reserved instant).
"""

from __future__ import annotations

from ultimate_jobs import operator
from ultimate_jobs.drivers.records import MAX_INSTANT_MS
from ultimate_jobs.testing import FrozenClock, run_jobs

from .backend import demo_driver
from .jobs import PAYMENT_GATEWAY, reconcile_payment
from .scenario_maintenance import _installed
from .services import ShopServices

BATCH = 12


def run_limits_part() -> list[str]:
    """Org-acme's batch and org-globex's one job on the fair payments queue, under the gateway's limit."""
    clock = FrozenClock()
    driver = demo_driver(clock)
    assert driver.rates is not None
    driver.rates.forget(before_ms=MAX_INSTANT_MS)  # the demo database outlives a run: a schedule from scratch
    shop = ShopServices()
    start = clock.now_ms()
    with _installed(clock, driver):
        batch = [reconcile_payment.enqueue({"org_id": "org-acme", "number": f"m{n:02d}"}).id for n in range(BATCH)]
        quiet = reconcile_payment.enqueue({"org_id": "org-globex", "number": "2001"}).id
        report = run_jobs(driver, clock=clock, queues=["payments"], context=lambda: shop)
        calls: dict[str, int] = {}
        for execution in report.executions:
            if execution.outcome == "completed":
                calls[execution.job_id] = int(execution.result["called_at_ms"]) - start
        handed_back = sum(1 for e in report.executions if e.outcome is None)
        rates = operator.inspect_rates()
    acme = sorted(calls[job_id] for job_id in batch)
    in_a_second = max(sum(1 for t in acme if s <= t < s + 1_000) for s in acme)
    order = sorted(calls, key=lambda job_id: calls[job_id])
    lines = [
        f"payments queue (FAIR_QUEUES), {PAYMENT_GATEWAY.name} {PAYMENT_GATEWAY.rate} per org (a RateLimit):",
        f"  org-acme enqueued {BATCH} reconciliations, then org-globex one; run_jobs claimed them 8 at a time",
        f"  org-globex's call went out at +{calls[quiet]} ms, number {order.index(quiet) + 1} of {len(order)}: "
        "the fair queue served it beside the batch, not behind it",
        f"  org-acme's {BATCH} calls went out from +{acme[0]} to +{acme[-1]} ms, at most {in_a_second} in any second; "
        f"{handed_back} runs found the org's key busy and were handed back to a reserved instant, no attempt spent",
        "  python manage.py jobs rates:",
    ]
    lines += [
        f"    {r.limit} {r.rate} key {r.key or '-'}: next start +{(r.next_at_ms or start) - start} ms, "
        f"{r.reserved} waiting"
        for r in rates
        if r.limit == PAYMENT_GATEWAY.name
    ]
    return lines
