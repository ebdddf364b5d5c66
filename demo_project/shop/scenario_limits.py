"""The demo's limits part: a fair queue and the payment provider's rate limit.

org-acme's month-end batch puts twelve ``reconcile_payment`` jobs on the ``payments`` queue, then
org-globex asks for one. The queue is fair (``FAIR_QUEUES`` in the demo's settings), so org-globex's job is
in the very next claim instead of behind the batch; the job is held to ``PAYMENT_GATEWAY`` — 5 gateway
calls a second per org — so org-acme's twelve calls spread over more than two seconds, each run that found
the org's key busy waiting for an instant reserved for it (in its slot when it is near, handed back
otherwise), no attempt spent. ``run_limits_part()``
answers printable lines; the ``shop_demo`` command prints them after the other parts.

It runs on the demo database's driver (SQLite, Postgres or Redis) with a frozen job clock, in this process
(``run_jobs``, whose frozen clock jumps to each reserved instant).
"""

from __future__ import annotations

from ultimate_jobs import operator
from ultimate_jobs.core.clock import MAX_INSTANT_MS
from ultimate_jobs.testing import FrozenClock, run_jobs

from .backend import demo_driver
from .jobs import PAYMENT_GATEWAY, reconcile_payment
from .scenario_maintenance import _installed
from .services import ShopServices

BATCH = 12
CLAIM = 8  # run_jobs' claim size: every run of one claim is run before the next claim


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
        report = run_jobs(driver, clock=clock, queues=["payments"], context=lambda: shop, batch=CLAIM)
        calls: dict[str, int] = {}
        for execution in report.executions:
            if execution.outcome == "completed":
                calls[execution.job_id] = int(execution.result["called_at_ms"]) - start
        handed_back = sum(1 for e in report.executions if e.outcome is None)
        rates = operator.inspect_rates()
    acme = sorted(calls[job_id] for job_id in batch)
    in_a_second = max(sum(1 for t in acme if s <= t < s + 1_000) for s in acme)
    first_claim = list(dict.fromkeys(e.job_id for e in report.executions))[:CLAIM]
    lines = [
        f"payments queue (FAIR_QUEUES), {PAYMENT_GATEWAY.name} {PAYMENT_GATEWAY.rate} per org (a RateLimit):",
        f"  org-acme enqueued {BATCH} reconciliations, then org-globex one; run_jobs claimed them {CLAIM} at a time",
        f"  org-globex's reconciliation was {'in' if quiet in first_claim else 'NOT in'} the first claim, beside "
        f"{sum(1 for j in first_claim if j in batch)} of org-acme's: a fair queue serves each org its turn (in a "
        f"plain one the first claim is org-acme's first {CLAIM})",
        f"  org-acme's {BATCH} calls went out from +{acme[0]} to +{acme[-1]} ms, at most {in_a_second} in any second; "
        f"{handed_back} hand-backs to an instant reserved for the run (a run whose instant was near waited for it in "
        "its slot), no attempt spent",
        "  python manage.py jobs rates:",
    ]
    lines += [
        f"    {r.limit} {r.rate} key {r.key or '-'}: next start +{(r.next_at_ms or start) - start} ms, "
        f"{r.reserved} waiting"
        for r in rates
        if r.limit == PAYMENT_GATEWAY.name
    ]
    return lines
