"""tests/unit needs no server: the memory driver and the frozen clock only. A test that reads or writes
Postgres (``django_db``, the ``postgres`` marker, ``any_jobs``'s Postgres half) belongs in tests/postgres,
and collecting one here is a usage error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = [
        item.nodeid
        for item in items
        if UNIT in item.path.resolve().parents
        and (item.get_closest_marker("django_db") or item.get_closest_marker("postgres"))
    ]
    if misplaced:
        raise pytest.UsageError(f"tests/unit needs no database; move these to tests/postgres: {misplaced}")
