"""The io case's ultimate_jobs worker processes: ``bench.settings`` plus the io jobs (``bench/io_jobs.py``,
through ``ULTIMATE_JOBS["MODULES"]``), which no other case's worker imports."""

from bench.settings import *  # noqa: F403
from bench.settings import ULTIMATE_JOBS as _BASE

ULTIMATE_JOBS = {**_BASE, "MODULES": ["bench.io_jobs"]}
