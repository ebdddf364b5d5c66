"""The rates case's ultimate_jobs processes on Postgres — its workers and ``python -m bench.rate_client``: the
bench settings plus the rates job (``bench/rate_jobs.py``, through ``ULTIMATE_JOBS["MODULES"]``), its start
stamped in ``bench_latency`` (``BENCH_RATES_STAMP = "sql"``), and a log that counts hand-backs: the
``ultimate_jobs`` logger at DEBUG, its ``jobs.job.rate-limited`` records (a run handed back, uncounted, to wait for
the instant its rate key reserved for it) appended to the file ``BENCH_RATES_HANDBACKS`` names, one JSON object a
line (the library's ``--log-format json`` formatter: ``ts``, ``event``, ``job_id``, ``wait_ms``, …);
stderr still gets warnings and errors only. ``bench.settings_rates_sqlite`` and ``bench.settings_rates_redis`` are
the same over the SQLite file and Redis. No other case's process runs under them."""

import os

from bench.settings import *  # noqa: F403
from bench.settings import LOGGING as _BASE_LOGGING
from bench.settings import ULTIMATE_JOBS as _BASE

HANDBACKS_ENV = "BENCH_RATES_HANDBACKS"

ULTIMATE_JOBS = {**_BASE, "MODULES": ["bench.rate_jobs"]}
BENCH_RATES_STAMP = "sql"


def rates_logging(base: dict) -> dict:
    """``base`` (the bench's LOGGING: warnings and errors to stderr) with the hand-back file beside it."""
    return {
        **base,
        "filters": {
            **base["filters"],
            "handbacks": {"()": "bench.common.EventOnly", "event": "jobs.job.rate-limited"},
        },
        "formatters": {**base["formatters"], "handback": {"()": "ultimate_jobs.integration.console.JsonFormatter"}},
        "handlers": {
            "stderr": {**base["handlers"]["stderr"], "level": "WARNING"},
            "handbacks": {
                "class": "logging.FileHandler",
                "filename": os.environ.get(HANDBACKS_ENV, os.devnull),
                "delay": True,
                "filters": ["fields", "handbacks"],
                "formatter": "handback",
            },
        },
        "loggers": {"ultimate_jobs": {"level": "DEBUG", "handlers": ["handbacks"]}},
    }


LOGGING = rates_logging(_BASE_LOGGING)
