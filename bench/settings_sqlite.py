"""The bench's worker processes on SQLite: ``bench.settings`` with the ``default`` database the SQLite
column's file and ``DRIVER`` unset, so it follows the database to the ``sqlite`` driver."""

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES as _BOTH

DATABASES = {"default": _BOTH["sqlite"]}

ULTIMATE_JOBS: dict[str, object] = {}
