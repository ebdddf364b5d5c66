"""``run.step.atomic`` on the Postgres driver: the cases of :mod:`tests.step_atomic_cases` (the same run on
SQLite in tests/sqlite/test_step_atomic_sqlite.py)."""

from __future__ import annotations

import pytest

from tests.conftest import ON_POSTGRES
from tests.step_atomic_cases import *  # noqa: F403  (the cases, their fixtures and helpers)

pytestmark = [pytest.mark.parametrize("any_jobs", [pytest.param("postgres", marks=ON_POSTGRES)], indirect=True)]
