"""Django settings for the Redis comparison (``bench/redis_cases.py``): ultimate_jobs on the Redis driver at
``BENCH_REDIS_URL``, the Redis bench jobs of :mod:`bench.redis_jobs`, Django's defaults otherwise. The
database entry is the bench's; the Redis driver never opens it."""

import os

from bench.settings import DATABASES, LOGGING, SECRET_KEY  # noqa: F401

DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["ultimate_jobs"]

ULTIMATE_JOBS = {
    "DRIVER": "redis",
    "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
    "MODULES": ["bench.redis_jobs"],
    "OUTBOX": "off",
}
