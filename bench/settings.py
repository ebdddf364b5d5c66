"""Django settings for the bench: ultimate_jobs on the postgres driver over a dedicated database
(``ultimate_jobs_bench``, created and migrated by ``python -m bench``), and the ``bench`` app whose
``jobs.py`` declares the measured jobs. Worker processes (``bench.worker_proc``) run under it too."""

from bench.common import PG_HOST, PG_PASSWORD, PG_PORT, PG_USER

BENCH_DATABASE = "ultimate_jobs_bench"

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["ultimate_jobs", "bench"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": BENCH_DATABASE,
        "USER": PG_USER,
        "PASSWORD": PG_PASSWORD,
        "HOST": PG_HOST,
        "PORT": PG_PORT,
        # Persistent connections, as a production deployment runs: a worker's job threads close stale
        # connections around every run, and with 0 here each job would open a fresh one.
        "CONN_MAX_AGE": 600,
    },
}

ULTIMATE_JOBS = {"DRIVER": "postgres"}

# Warnings and errors go to stderr, which the bench collects in bench/results/<timestamp>.workers.log.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"fields": {"()": "bench.common.LogFields"}},
    "formatters": {"bench": {"format": "%(asctime)s pid=%(process)d %(levelname)s %(name)s %(message)s %(jobs)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "filters": ["fields"], "formatter": "bench"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
}
