"""Settings for the chaos suite's processes: :mod:`tests.e2e.pg_settings` (the Postgres driver,
``UJ_VT`` for the visibility timeout, ``ULTIMATE_JOBS_TEST_DB`` for the database name) pointed at the
suite's private cluster by ``UJ_CHAOS_PGHOST`` / ``UJ_CHAOS_PGPORT``, with the jobs of
:mod:`tests.chaos.workload`. Nothing here can reach the shared server: both variables are required.
"""

import os

from tests.e2e.pg_settings import *  # noqa: F403
from tests.e2e.pg_settings import DATABASES, ULTIMATE_JOBS

DATABASES = {
    "default": {
        **DATABASES["default"],
        "HOST": os.environ["UJ_CHAOS_PGHOST"],
        "PORT": os.environ["UJ_CHAOS_PGPORT"],
    },
}

ULTIMATE_JOBS = {**ULTIMATE_JOBS, "MODULES": ["tests.chaos.workload"]}
