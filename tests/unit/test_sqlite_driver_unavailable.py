"""Building the SQLite driver where it cannot run is ``X_DRIVER_UNAVAILABLE`` with the fix, before any
statement: an alias that is not SQLite (this suite's is PostgreSQL), an alias that does not exist, an
SQLite library older than 3.35 (no RETURNING)."""

from __future__ import annotations

import pytest

from ultimate_jobs.drivers.sqlite import driver as sqlite_driver
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.errors import DriverUnavailableError


def test_an_alias_that_is_not_sqlite_is_refused_naming_the_postgres_driver() -> None:
    with pytest.raises(DriverUnavailableError) as caught:
        SqliteDriver(alias="default")
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert "alias 'default' is postgresql" in caught.value.message and "'postgres'" in caught.value.message


def test_an_alias_that_does_not_exist_is_refused() -> None:
    with pytest.raises(DriverUnavailableError, match="no database alias 'nowhere'"):
        SqliteDriver(alias="nowhere")


def test_an_sqlite_library_without_returning_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_driver.sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite_driver.sqlite3, "sqlite_version", "3.34.1")
    with pytest.raises(DriverUnavailableError) as caught:
        SqliteDriver(alias="default")
    assert "needs SQLite 3.35.0 or newer" in caught.value.message and "3.34.1" in caught.value.message
