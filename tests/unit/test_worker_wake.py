"""The idle ceiling follows the driver's wake, and the wake's parts that need no server: the re-dial
back-off, the conninfo it builds from Django's settings, its own ceiling rule."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.conftest import JobsEnv
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.wake import QueueWake, conninfo_for
from ultimate_jobs.errors import InvariantError
from ultimate_jobs.runtime.polling import idle_ceiling_for
from ultimate_jobs.worker import IDLE_POLL_CEILING_MS, WOKEN_IDLE_POLL_CEILING_MS, JobWorker, job_worker


class WakingDriver:
    """The memory driver plus the pg driver's ``wake_is_live()``, answering ``live`` (or raising)."""

    def __init__(self, inner: MemoryDriver) -> None:
        self.inner = inner
        self.name = inner.name
        self.supports_listen = True
        self.live = False
        self.broken = False

    @property
    def operator(self) -> Any:
        return self.inner.operator

    @property
    def leases(self) -> Any:
        return self.inner.leases

    def wake_is_live(self) -> bool:
        if self.broken:
            raise ConnectionError("the wake went away")
        return self.live

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def worker_over(driver: Any, **options: Any) -> JobWorker:
    return job_worker(driver=driver, context=lambda: None, queues=["wq"], **options)


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ultimate_jobs" and r.getMessage() == name]


# -- the worker's ceiling ----------------------------------------------------------------------


def test_a_driver_without_a_wake_keeps_the_two_second_ceiling(jobs: JobsEnv) -> None:
    assert worker_over(jobs.driver).idle_ceiling_ms() == IDLE_POLL_CEILING_MS == 2_000


def test_the_ceiling_rises_only_while_the_wake_is_proven_and_follows_it(jobs: JobsEnv) -> None:
    driver = WakingDriver(jobs.driver)
    worker = worker_over(driver)
    assert worker.idle_ceiling_ms() == IDLE_POLL_CEILING_MS
    driver.live = True
    assert worker.idle_ceiling_ms() == WOKEN_IDLE_POLL_CEILING_MS == 5_000
    driver.live = False  # the session was lost: back to the guarantee's ceiling at the next pass
    assert worker.idle_ceiling_ms() == IDLE_POLL_CEILING_MS


def test_a_declared_idle_poll_max_is_the_ceiling_either_way(jobs: JobsEnv) -> None:
    driver = WakingDriver(jobs.driver)
    worker = worker_over(driver, idle_poll_max="750ms")
    assert worker.idle_ceiling_ms() == 750
    driver.live = True
    assert worker.idle_ceiling_ms() == 750


def test_a_wake_that_cannot_answer_counts_as_unproven(jobs: JobsEnv, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ultimate_jobs")
    driver = WakingDriver(jobs.driver)
    driver.broken = True
    assert worker_over(driver).idle_ceiling_ms() == IDLE_POLL_CEILING_MS
    [record] = events(caplog, "jobs.worker.wake-check-failed")
    assert "the wake went away" in record.jobs["error"]


def test_the_ceiling_rule() -> None:
    assert idle_ceiling_for(None, wake_live=False) == 2_000
    assert idle_ceiling_for(None, wake_live=True) == 5_000
    assert idle_ceiling_for(1_234, wake_live=False) == 1_234
    assert idle_ceiling_for(1_234, wake_live=True) == 1_234


# -- the wake without a server -----------------------------------------------------------------


def unreachable_wake(**options: Any) -> QueueWake:
    """A wake whose server refuses every dial (nothing listens on port 1)."""
    return QueueWake(
        conninfo="host=127.0.0.1 port=1 dbname=nowhere user=nobody connect_timeout=2",
        probe=lambda payload: None,
        on_wake=lambda queue: None,
        **options,
    )


def test_a_refused_dial_backs_off_doubling_to_the_bound(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ultimate_jobs")
    wake = unreachable_wake(redial_min_ms=50, redial_max_ms=200)
    assert [wake.run_once() for _ in range(4)] == [0.05, 0.1, 0.2, 0.2]
    assert not wake.is_live() and wake.session_pid is None and wake.dials == 0
    failed = events(caplog, "jobs.wake.dial-failed")
    assert [r.jobs["retry_in_ms"] for r in failed] == [50, 100, 200, 200]
    assert all(r.levelno == logging.WARNING for r in failed)
    assert wake.stop() is True


def test_the_wake_ceiling_is_two_seconds_until_proven_and_a_declared_one_wins() -> None:
    wake = unreachable_wake()
    assert wake.idle_ceiling_ms(None) == 2_000
    assert wake.idle_ceiling_ms(900) == 900
    wake.stop()


def test_a_stopped_wake_does_not_start_again() -> None:
    wake = unreachable_wake()
    assert wake.stop() is True
    with pytest.raises(InvariantError):
        wake.start()
    assert wake.run_once() == 0.0  # a step after stop does nothing


def test_bad_construction_is_refused() -> None:
    with pytest.raises(InvariantError, match="does not parse"):
        QueueWake(conninfo="nonsense", probe=lambda p: None, on_wake=lambda q: None)
    with pytest.raises(InvariantError, match="redial_min_ms"):
        unreachable_wake(redial_min_ms=500, redial_max_ms=100)


def test_the_session_conninfo_keeps_the_callers_keepalives_and_adds_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    dialled: list[str] = []

    def refuse(conninfo: str, **_: Any) -> None:
        dialled.append(conninfo)
        raise psycopg.OperationalError("no server here")

    monkeypatch.setattr("ultimate_jobs.drivers.postgres.wake.psycopg.connect", refuse)
    wake = QueueWake(
        conninfo="postgresql://app@db.internal:6432/shop?keepalives_idle=5",
        probe=lambda p: None,
        on_wake=lambda q: None,
    )
    assert wake.run_once() > 0  # one dial, refused: back off
    (conninfo,) = dialled
    params = conninfo_to_dict(conninfo)
    assert (params["host"], params["port"], params["dbname"], params["user"]) == ("db.internal", "6432", "shop", "app")
    assert params["keepalives_idle"] == "5"
    assert (params["keepalives"], params["application_name"]) == ("1", "ultimate_jobs.wake")


def test_conninfo_from_a_django_database_entry() -> None:
    settings_dict = {
        "NAME": "test_shop",
        "USER": "worker",
        "PASSWORD": "s3cret word",
        "HOST": "127.0.0.1",
        "PORT": "5432",
        "OPTIONS": {"sslmode": "disable", "isolation_level": 1, "pool": True, "server_side_binding": True},
    }
    params = conninfo_to_dict(conninfo_for(settings_dict))
    assert params == {
        "dbname": "test_shop",
        "user": "worker",
        "password": "s3cret word",
        "host": "127.0.0.1",
        "port": "5432",
        "sslmode": "disable",
    }
    assert conninfo_to_dict(conninfo_for({"NAME": None, "USER": "", "OPTIONS": {}})) == {"dbname": "postgres"}
