"""Settings for the outbound process tests' workers: :mod:`tests.e2e.pg_settings` with the export and the
webhook of :mod:`tests.e2e.outbound_jobs` declared instead of the e2e jobs."""

from tests.e2e.pg_settings import *  # noqa: F403
from tests.e2e.pg_settings import ULTIMATE_JOBS

ULTIMATE_JOBS = {**ULTIMATE_JOBS, "MODULES": ["tests.e2e.outbound_jobs"]}
