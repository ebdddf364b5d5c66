"""The fairness case's ultimate_jobs processes — its workers and ``python -m bench.fair_client``, which enqueues
for it: ``bench.settings`` plus the fairness jobs (``bench/fair_jobs.py``, through ``ULTIMATE_JOBS["MODULES"]``)
and ``FAIR_QUEUES`` naming ``bench_fair``. Both sides run under it because a fair queue's row takes its org's
lane when it is enqueued, and the worker reads the setting for its claims. ``bench_plain``, the same jobs'
queue with fairness off, is named nowhere. No other case's process runs under it."""

from bench.settings import *  # noqa: F403
from bench.settings import ULTIMATE_JOBS as _BASE

ULTIMATE_JOBS = {**_BASE, "MODULES": ["bench.fair_jobs"], "FAIR_QUEUES": ["bench_fair"]}
