"""Settings for the real processes of ``test_postgres_processes``: the suite's settings on the Postgres
driver, with the e2e jobs of :mod:`tests.e2e.pg_jobs`.

The parent test passes ``ULTIMATE_JOBS_TEST_DB`` already naming the test database (``test_…``): a
child is not under pytest-django, so ``NAME`` is used as it is. ``UJ_VT`` sets the visibility
timeout (a short one makes a killed worker's lease lapse quickly); ``UJ_FLEET_PER_TENANT`` (``queue=n``)
caps each org's running jobs in that queue across the fleet. The library's WARNING and worse
go to stderr, where the parent keeps them for its failure messages.
"""

import os

from tests.settings import *  # noqa: F403

_capped_queue, _, _cap = os.environ.get("UJ_FLEET_PER_TENANT", "").partition("=")
ULTIMATE_JOBS = {
    "DRIVER": "postgres",
    "VISIBILITY_TIMEOUT": os.environ.get("UJ_VT", "30s"),
    "MODULES": ["tests.e2e.pg_jobs"],
    "LIMITS": {"FLEET_PER_TENANT": {_capped_queue: int(_cap)} if _cap else {}},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"event": {"format": "%(levelname)s %(message)s %(jobs)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "event"}},
    "loggers": {"ultimate_jobs": {"handlers": ["stderr"], "level": os.environ.get("UJ_LOG_LEVEL", "WARNING")}},
}
