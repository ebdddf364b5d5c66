"""Settings for :mod:`tests.migration_history`: the app alone on a database the parent test names —
``MIGRATION_DB_ENGINE`` (``postgresql`` or ``sqlite3``) and ``MIGRATION_DB_NAME`` (a database on the suite's
server, or an SQLite file). The driver follows the database, as a fresh project's does."""

import os

SECRET_KEY = "test"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["ultimate_jobs"]

_ENGINE = os.environ["MIGRATION_DB_ENGINE"]
DATABASES = {
    "default": {
        "ENGINE": f"django.db.backends.{_ENGINE}",
        "NAME": os.environ["MIGRATION_DB_NAME"],
        **({"USER": "postgres", "HOST": "127.0.0.1", "PORT": "5432"} if _ENGINE == "postgresql" else {}),
    },
}
