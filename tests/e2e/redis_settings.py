"""Settings for the real processes of ``test_redis_processes``: the suite's settings on the Redis
driver (``UJ_REDIS_URL``), with the e2e jobs of :mod:`tests.e2e.redis_jobs`. ``UJ_VT`` sets the
visibility timeout; the library's WARNING and worse go to stderr."""

import os

from tests.settings import *  # noqa: F403

ULTIMATE_JOBS = {
    "DRIVER": "redis",
    "REDIS_URL": os.environ["UJ_REDIS_URL"],
    "VISIBILITY_TIMEOUT": os.environ.get("UJ_VT", "30s"),
    "MODULES": ["tests.e2e.redis_jobs"],
    "OUTBOX": "off",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"event": {"format": "%(levelname)s %(message)s %(jobs)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "event"}},
    "loggers": {"ultimate_jobs": {"handlers": ["stderr"], "level": os.environ.get("UJ_LOG_LEVEL", "WARNING")}},
}
