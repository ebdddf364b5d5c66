"""Settings for the real worker processes of ``tests/sqlite/test_sqlite_processes``: the SQLite test
settings with DRIVER unset (it follows the database: ``sqlite``) and the jobs of
:mod:`tests.sqlite.process_jobs`.

The parent test passes ``ULTIMATE_JOBS_SQLITE_DB`` naming its test database file, so rows committed there
are the children's. ``UJ_VT`` sets the visibility timeout (a short one makes a killed worker's lease lapse
quickly). The library's WARNING and worse go to stderr, where the parent keeps them for its failure messages.
"""

import os

from tests.sqlite_settings import *  # noqa: F403

ULTIMATE_JOBS = {
    "VISIBILITY_TIMEOUT": os.environ.get("UJ_VT", "30s"),
    "MODULES": ["tests.sqlite.process_jobs"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"event": {"format": "%(levelname)s %(message)s %(jobs)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "event"}},
    "loggers": {"ultimate_jobs": {"handlers": ["stderr"], "level": os.environ.get("UJ_LOG_LEVEL", "WARNING")}},
}
