"""Django settings for the bench, Django's defaults otherwise: ultimate_jobs on the postgres driver over a
dedicated database (``ultimate_jobs_bench``, created and migrated by ``python -m bench``), and the ``bench``
app whose ``jobs.py`` declares the measured jobs. Worker processes (``manage.py jobs_worker``) run under it
too. The ``sqlite`` alias is the SQLite column's file (``bench/sqlite.py``); its worker processes run under
``bench.settings_sqlite``."""

import os

from bench.common import PG_HOST, PG_PASSWORD, PG_PORT, PG_USER, SQLITE_FILE

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
        # CONN_MAX_AGE is left at Django's default (0), as the README does not tell users to change it.
    },
    "sqlite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_SQLITE_FILE", str(SQLITE_FILE)),
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
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
