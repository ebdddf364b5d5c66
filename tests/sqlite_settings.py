"""The test settings on SQLite: ``tests.settings`` with the ``default`` database an SQLite file.

``pytest --ds=tests.sqlite_settings tests/sqlite`` (``make test`` runs it) binds the driver conformance
suite and the worker tests to the ``sqlite`` driver. The file is ``ULTIMATE_JOBS_SQLITE_DB`` when set,
else ``.sqlite/test-<ULTIMATE_JOBS_TEST_DB>.sqlite3`` under the project, so two checkouts never share one.
"""

import os
from pathlib import Path

from tests.settings import *  # noqa: F403

_ROOT = Path(__file__).resolve().parent.parent
_FILE = os.environ.get("ULTIMATE_JOBS_SQLITE_DB") or str(
    _ROOT / ".sqlite" / f"test-{os.environ.get('ULTIMATE_JOBS_TEST_DB', 'ultimate_jobs')}.sqlite3"
)
Path(_FILE).parent.mkdir(parents=True, exist_ok=True)

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _FILE,
        # a file, not pytest-django's in-memory default: worker threads and worker processes share it
        "TEST": {"NAME": _FILE},
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
    },
}

ULTIMATE_JOBS = {"DRIVER": "memory"}
