"""The rates case's ultimate_jobs processes on SQLite: ``bench.settings_sqlite`` (the SQLite column's one file,
``DRIVER`` unset: it follows the database) with what ``bench.settings_rates`` adds — the rates job, its start
stamped in the file's ``bench_latency``, the hand-back log."""

from bench import settings_rates as _rates
from bench.settings_sqlite import *  # noqa: F403

ULTIMATE_JOBS = {"MODULES": ["bench.rate_jobs"]}
BENCH_RATES_STAMP = _rates.BENCH_RATES_STAMP
LOGGING = _rates.LOGGING
