"""The rates case's ultimate_jobs processes on Redis: ``bench.redis_settings`` (the Redis driver at
``BENCH_REDIS_URL``) with the rates job instead of the Redis comparison's, its start stamped on that Redis
database (``RPUSH bench:rate-starts``), and ``bench.settings_rates``' hand-back log."""

from bench import settings_rates as _rates
from bench.redis_settings import *  # noqa: F403
from bench.redis_settings import ULTIMATE_JOBS as _BASE

ULTIMATE_JOBS = {**_BASE, "MODULES": ["bench.rate_jobs"]}
BENCH_RATES_STAMP = "redis"
LOGGING = _rates.LOGGING
