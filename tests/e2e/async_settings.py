"""Settings for ``test_async_worker_processes``: :mod:`tests.e2e.pg_settings` with the async e2e jobs of
:mod:`tests.e2e.async_jobs`."""

from tests.e2e.pg_settings import *  # noqa: F403
from tests.e2e.pg_settings import ULTIMATE_JOBS as PG_JOBS

ULTIMATE_JOBS = {**PG_JOBS, "MODULES": ["tests.e2e.async_jobs"]}
