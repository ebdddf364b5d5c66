"""The rates case's job for ultimate_jobs: a no-op held to one rate limit of ``RATES_PER_S`` (50/s) on one key,
whose body stamps its start.

Imported under the rates case's settings only (``bench.settings_rates``, ``bench.settings_rates_sqlite``,
``bench.settings_rates_redis``: ``ULTIMATE_JOBS["MODULES"]``): by its worker processes and by
``python -m bench.rate_client``, which enqueues and reads the jobs back. Never by the bench process or the other
cases' workers, so their registries stay as they were.

The body's first act is the wall clock (``time.time()``, epoch seconds); it stores it where the driver's own
data lives (``settings.BENCH_RATES_STAMP``): ``sql`` — a row ``('rate', n, started)`` of the ``bench_latency``
table through Django's connection (the Postgres database or the SQLite file); ``redis`` — ``RPUSH
bench:rate-starts "<n> <started>"`` on the driver's Redis database. Every start is kept, a second start of the
same job too.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import LATENCY_TABLE
from bench.plan import RATES_PER_S
from ultimate_jobs import JobRun, RateLimit, job

RATES_QUEUE = "bench_rates"
RATES_NAME = "bench_rate_noop"
RATES_KIND = "rate"  # the bench_latency rows' kind
RATES_REDIS_LIST = "bench:rate-starts"
RATES_KEY = "one"  # every job's rate_key: the one key the limit schedules

BENCH_RATE = RateLimit("bench-rates", f"{RATES_PER_S}/s")

_redis: Any = None


def _stamp_redis(n: int, started: float) -> None:
    global _redis
    if _redis is None:
        import redis
        from django.conf import settings

        _redis = redis.Redis.from_url(settings.ULTIMATE_JOBS["REDIS_URL"])
    _redis.rpush(RATES_REDIS_LIST, f"{n} {started!r}")


def _stamp_sql(n: int, started: float) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"insert into {LATENCY_TABLE} (kind, n, started) values (%s, %s, %s)", [RATES_KIND, n, started])


@job(
    name=RATES_NAME,
    queue=RATES_QUEUE,
    idempotency_key=lambda i: f"rate:{i['n']}",
    tenant="none",
    rate_limit=BENCH_RATE,
    rate_key=lambda i: str(i["key"]),
)
def bench_rate_noop(run: JobRun[Any]) -> None:
    """Stamps its start (the wall clock, first thing) and does nothing else."""
    started = time.time()
    from django.conf import settings

    if getattr(settings, "BENCH_RATES_STAMP", "sql") == "redis":
        _stamp_redis(int(run.input["n"]), started)
    else:
        _stamp_sql(int(run.input["n"]), started)
