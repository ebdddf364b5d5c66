"""The fairness case's enqueuing process for ultimate_jobs, under ``bench.settings_fair`` (so its fair queue's rows
take their org's lane, as the worker's settings say), in a process of its own so the bench process never
registers the fairness jobs (its other cases read the registry: ``jobs queues``, ``/metrics``).

``python -m bench.fair_client backlog QUEUE ORG N BATCH`` — ``ORG``'s ``N`` no-op jobs into ``QUEUE`` through
``job_driver().enqueue_many``, ``BATCH`` at a time; prints ``{"enqueued": N}``.

``python -m bench.fair_client probes QUEUE ORG KIND COUNT INTERVAL_S`` — once Django is set up, waits for a line
on stdin (the bench sends it when the worker is up: this process starts before the worker, so its start-up is
not spent while a backlog drains), then ``COUNT`` probes of ``ORG`` into ``QUEUE``, one every ``INTERVAL_S``
(``bench_org_probe.enqueue`` outside ``atomic()``, as the latency case's probes); prints ``{"sent": {n: t}}``,
``t`` the wall clock (epoch s) just after probe ``n``'s enqueue call returned (its COMMIT done).
"""

from __future__ import annotations

import os
import sys
import time


def main(argv: list[str]) -> int:
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings_fair"
    import django

    django.setup()
    from bench.common import emit, paced
    from bench.fair_jobs import bench_org_noop, bench_org_probe
    from ultimate_jobs.core.installed import job_driver

    command, queue, org = argv[0], argv[1], argv[2]
    if command == "backlog":
        n, size = int(argv[3]), int(argv[4])
        driver = job_driver()
        for start in range(0, n, size):
            batch = range(start, min(start + size, n))
            driver.enqueue_many([bench_org_noop.build_request({"org": org, "n": i}, queue=queue) for i in batch])
        emit({"enqueued": n})
        return 0
    kind, count, interval = argv[3], int(argv[4]), float(argv[5])
    sys.stdin.readline()
    sent: dict[int, float] = {}
    for i in paced(count, interval):
        bench_org_probe.enqueue({"org": org, "kind": kind, "n": i}, queue=queue)
        sent[i] = time.time()
    emit({"sent": sent})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
