"""Settings for the backfill SIGKILL test's worker processes: :mod:`tests.e2e.pg_settings` with the
backfill of :mod:`tests.e2e.backfill_jobs` declared instead of the e2e jobs."""

from tests.e2e.pg_settings import *  # noqa: F403
from tests.e2e.pg_settings import ULTIMATE_JOBS

ULTIMATE_JOBS = {**ULTIMATE_JOBS, "MODULES": ["tests.e2e.backfill_jobs"]}
