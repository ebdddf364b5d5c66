"""The rates case's own ultimate_jobs process, under the measured driver's rates settings (``bench.settings_rates``,
``bench.settings_rates_sqlite`` or ``bench.settings_rates_redis``, from ``DJANGO_SETTINGS_MODULE``), so the bench
process never registers the rates job and every driver is read the same way: through the public surface.

``python -m bench.rate_client load N BATCH`` — ``N`` jobs of ``bench_rate_noop`` (inputs ``{"n": i, "key":
"one"}``) through ``job_driver().enqueue_many``, ``BATCH`` at a time; prints ``{"enqueued": N, "driver": name}``.
Exits 2 with the reason when the driver keeps no rate schedules (``driver.rates`` is None).

``python -m bench.rate_client report TIMEOUT_S`` — polls ``job_driver().stats()`` every 100 ms until the rates
queue holds no live row (ready, delayed, running, suspended) or ``TIMEOUT_S`` passed, then reads every job of
``bench_rate_noop`` through ``driver.operator.list`` (pages of 200) and every start its body stamped; prints
``{"drained": bool, "jobs": count, "states": {state: count}, "attempts": {attempts: count}, "finished_last_ms":
…, "starts": [[n, epoch s], …]}``.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import Any

POLL_S = 0.1


def starts(stamp: str) -> list[list[float]]:
    """Every start the bodies stamped, ``[n, epoch s]``, in no particular order."""
    from bench.rate_jobs import RATES_KIND, RATES_REDIS_LIST

    if stamp == "redis":
        import redis
        from django.conf import settings

        client = redis.Redis.from_url(settings.ULTIMATE_JOBS["REDIS_URL"])
        out = []
        for item in client.lrange(RATES_REDIS_LIST, 0, -1):
            n, at = item.decode().split()
            out.append([int(n), float(at)])
        return out
    from django.db import connection

    from bench.common import LATENCY_TABLE

    with connection.cursor() as cursor:
        cursor.execute(f"select n, started from {LATENCY_TABLE} where kind = %s", [RATES_KIND])
        return [[int(n), float(at)] for n, at in cursor.fetchall()]


def live(driver: Any, queue: str) -> int:
    """Rows of ``queue`` not yet finished (ready, delayed, running, suspended)."""
    return sum(s.ready + s.delayed + s.running + s.suspended for s in driver.stats() if s.queue == queue)


def report(timeout_s: float) -> dict[str, Any]:
    from django.conf import settings

    from bench.rate_jobs import RATES_NAME, RATES_QUEUE
    from ultimate_jobs.contracts.operator import MAX_JOB_PAGE, JobFilter
    from ultimate_jobs.contracts.ordering import job_cursor
    from ultimate_jobs.core.installed import job_driver

    driver = job_driver()
    deadline = time.monotonic() + timeout_s
    drained = False
    while time.monotonic() < deadline:
        if live(driver, RATES_QUEUE) == 0:
            drained = True
            break
        time.sleep(POLL_S)
    rows = []
    after: str | None = None
    while True:
        page = driver.operator.list(JobFilter(name=RATES_NAME, limit=MAX_JOB_PAGE, after=after))
        rows.extend(page.rows)
        if page.is_last or not page.rows:
            break
        after = job_cursor(page.rows[-1])
    finished = [r.finished_at_ms for r in rows if r.finished_at_ms is not None]
    return {
        "drained": drained,
        "jobs": len(rows),
        "states": dict(Counter(str(r.state) for r in rows)),
        "attempts": {str(a): c for a, c in Counter(r.attempts for r in rows).items()},
        "finished_last_ms": max(finished) if finished else None,
        "starts": starts(getattr(settings, "BENCH_RATES_STAMP", "sql")),
    }


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings_rates")
    import django

    django.setup()
    from bench.common import emit
    from bench.rate_jobs import RATES_KEY, bench_rate_noop
    from ultimate_jobs.core.installed import job_driver

    driver = job_driver()
    if argv[0] == "load":
        if getattr(driver, "rates", None) is None:
            print(f"the {driver.name} driver keeps no rate schedules (driver.rates is None)", file=sys.stderr)
            return 2
        n, size = int(argv[1]), int(argv[2])
        for start in range(0, n, size):
            batch = range(start, min(start + size, n))
            driver.enqueue_many([bench_rate_noop.build_request({"n": i, "key": RATES_KEY}) for i in batch])
        emit({"enqueued": n, "driver": driver.name})
        return 0
    emit(report(float(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
