"""The chaos suite's producer process: ``python -m tests.chaos.produce jobs N`` or ``... orders N``, with
``DJANGO_SETTINGS_MODULE=tests.chaos.settings``.

- ``jobs N``: enqueues ``chaos_steps`` and ``chaos_atomic`` in turn under keys ``job-000000``… in batches
  straight to the driver, then prints ``ENQUEUED <n>``.
- ``orders N``: installs the outbox (``mode="required"``) and places orders, each in its own
  ``transaction.atomic()``: the demo shop's ``Order`` row and ``chaos_order`` staged with it. Every
  odd-numbered order raises before the commit, so it rolls back. It places them as the parent says:
  each stdin line is how many orders should be placed by now (the parent follows its jobs' progress,
  so the orders arrive all through the run). A database error (the parent crashes Postgres under it)
  ends that order with whatever the database kept; the producer waits for the server and goes on.
  After the N-th order it prints one JSON line ``{"committed", "rolled_back", "failed"}`` of numbers.
"""

from __future__ import annotations

import json
import os
import sys

from tests.helpers import eventually

BATCH = 500
RECONNECT_S = 60.0


class Declined(Exception):
    """The order's transaction is rolled back on purpose."""


def enqueue_jobs(count: int) -> None:
    from tests.chaos.workload import chaos_atomic, chaos_steps
    from ultimate_jobs.core.installed import job_driver

    driver = job_driver()
    kinds = (chaos_steps, chaos_atomic)  # every other job's steps are transactional
    for start in range(0, count, BATCH):
        requests = [
            kinds[i % 2].build_request({"key": f"job-{i:06d}"}) for i in range(start, min(count, start + BATCH))
        ]
        driver.enqueue_many(requests)
    print(f"ENQUEUED {count}", flush=True)


def reconnect() -> None:
    """Drop the broken connection and wait, bounded, until the server answers again."""
    from django.db import Error, connection

    def connected() -> bool:
        connection.close()
        try:
            connection.ensure_connection()
        except Error:
            return False
        return True

    eventually(connected, timeout=RECONNECT_S, interval=0.05)


def place_orders(count: int) -> None:
    from django.db import Error, transaction

    from demo_project.shop.models import Order
    from tests.chaos.workload import chaos_order
    from ultimate_jobs.outbox import install_outbox

    install_outbox(mode="required")
    outcome: dict[str, list[str]] = {"committed": [], "rolled_back": [], "failed": []}
    placed = 0
    for line in sys.stdin:
        target = min(int(line), count)
        for i in range(placed, target):
            number = f"{i:06d}"
            try:
                with transaction.atomic():
                    Order.objects.create(org_id="chaos", number=number, total_cents=100)
                    chaos_order.enqueue({"number": number})
                    if i % 2:
                        raise Declined(number)
            except Declined:
                outcome["rolled_back"].append(number)
            except Error:
                outcome["failed"].append(number)
                reconnect()
            else:
                outcome["committed"].append(number)
        placed = max(placed, target)
        if placed == count:
            break
    print(json.dumps(outcome), flush=True)


def main() -> int:
    what, count = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.chaos.settings")
    import django

    django.setup()
    if what == "jobs":
        enqueue_jobs(count)
    elif what == "orders":
        place_orders(count)
    else:
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
