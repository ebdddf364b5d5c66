"""Settings for the scheduler and event-bus process tests: the Postgres process settings plus the
tasks and jobs of :mod:`tests.e2e.sched_jobs`. The event bus is the Postgres one (the default on the
Postgres driver), so a wait in one process hears a publish from another."""

from tests.e2e.pg_settings import *  # noqa: F403
from tests.e2e.pg_settings import ULTIMATE_JOBS as _PG

ULTIMATE_JOBS = {**_PG, "MODULES": [*_PG["MODULES"], "tests.e2e.sched_jobs"]}
