"""The wake against the real server: LISTEN on a dedicated session, proven by a probe through Django's
connection, re-dialled after its backend is killed.

The session points at Django's test database (``connection.settings_dict`` once pytest-django has
created it): a notification never crosses databases, so notifier and listener share that one. Every
wait is a bounded ``eventually()``; the wake's proof window and back-off are shrunk to milliseconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.helpers import eventually
from ultimate_jobs.drivers.postgres.queries.jobs import WAKE_CHANNEL
from ultimate_jobs.drivers.postgres.wake import PROBE_PREFIX, QueueWake, conninfo_for, pool_probe, start_queue_wake
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WAIT = 5.0  # the bound on every cross-thread wait; a passing test never spends it


class Heard:
    """What ``on_wake`` was handed, in order, from the wake's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: list[str] = []

    def __call__(self, queue: str) -> None:
        with self._lock:
            self._queues.append(queue)

    @property
    def queues(self) -> list[str]:
        with self._lock:
            return list(self._queues)


@pytest.fixture
def conninfo() -> str:
    return conninfo_for(connection.settings_dict)


@pytest.fixture
def admin(conninfo: str) -> Iterator[psycopg.Connection[Any]]:
    """Another process's connection: it notifies, and it kills backends."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        yield conn


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="ultimate_jobs")
    return caplog


@pytest.fixture
def make_wake(conninfo: str) -> Iterator[Callable[..., QueueWake]]:
    """Build (and by default start) a wake on the test database with millisecond timings; every wake
    built is stopped at teardown, and must join."""
    built: list[QueueWake] = []

    def make(*, on_wake: Callable[[str], None], start: bool = True, **options: Any) -> QueueWake:
        options.setdefault("probe", pool_probe("default"))
        options.setdefault("proof_timeout_ms", 2_000)
        options.setdefault("redial_min_ms", 20)
        options.setdefault("redial_max_ms", 200)
        options.setdefault("read_timeout_ms", 20)
        wake = QueueWake(conninfo=conninfo, on_wake=on_wake, **options)
        built.append(wake)
        if start:
            wake.start()
        return wake

    yield make
    for wake in built:
        assert wake.stop(timeout=WAIT), "a wake's thread did not join"


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ultimate_jobs" and r.getMessage() == name]


def notify(admin: psycopg.Connection[Any], payload: str) -> None:
    admin.execute("select pg_notify(%s, %s)", [WAKE_CHANNEL, payload])


def backend_alive(admin: psycopg.Connection[Any], pid: int) -> bool:
    row = admin.execute("select count(*) from pg_stat_activity where pid = %s", [pid]).fetchone()
    return row is not None and row[0] == 1


def test_a_notification_from_another_connection_reaches_on_wake(
    make_wake: Callable[..., QueueWake], admin: psycopg.Connection[Any]
) -> None:
    heard = Heard()
    wake = make_wake(on_wake=heard)
    eventually(wake.is_live, timeout=WAIT)
    notify(admin, "emails")
    eventually(lambda: "emails" in heard.queues, timeout=WAIT)
    with admin.transaction():  # a notification inside a transaction is delivered by its COMMIT
        notify(admin, "billing")
    eventually(lambda: "billing" in heard.queues, timeout=WAIT)


def test_the_probe_proves_the_session_and_is_never_a_queue(
    make_wake: Callable[..., QueueWake], logs: pytest.LogCaptureFixture
) -> None:
    first_heard, second_heard = Heard(), Heard()
    first = make_wake(on_wake=first_heard)
    second = make_wake(on_wake=second_heard)  # each hears the other's probe on the shared channel too
    eventually(lambda: first.is_live() and second.is_live(), timeout=WAIT)
    eventually(lambda: len(events(logs, "jobs.wake.live")) >= 2, timeout=WAIT)  # logged just after going live
    live = events(logs, "jobs.wake.live")
    assert len(live) == 2 and all(r.levelno == logging.INFO for r in live)
    assert {r.jobs["session_pid"] for r in live} == {first.session_pid, second.session_pid}
    assert first.idle_ceiling_ms(None) == 5_000 and first.idle_ceiling_ms(800) == 800
    assert not [q for q in first_heard.queues + second_heard.queues if q.startswith(PROBE_PREFIX)]
    assert not events(logs, "jobs.wake.unverified")


def test_an_unproven_wake_warns_once_with_the_fix_and_keeps_the_short_ceiling(
    make_wake: Callable[..., QueueWake], admin: psycopg.Connection[Any], logs: pytest.LogCaptureFixture
) -> None:
    swallowed: list[str] = []  # a pool that never delivers: the transaction-pooling proxy's behaviour
    heard = Heard()
    wake = make_wake(on_wake=heard, probe=swallowed.append, start=False, proof_timeout_ms=100)

    def step_until_unverified() -> list[logging.LogRecord]:
        wake.run_once()
        return events(logs, "jobs.wake.unverified")

    [unverified] = eventually(step_until_unverified, timeout=WAIT)
    assert unverified.levelno == logging.WARNING
    assert "session-pooled DATABASE_URL" in unverified.jobs["fix"]
    assert "pool_mode=transaction" in unverified.jobs["fix"]
    for _ in range(5):  # more reads of the same unproven session: no second warning
        assert wake.run_once() == 0.0
    assert len(events(logs, "jobs.wake.unverified")) == 1
    assert not wake.is_live() and wake.idle_ceiling_ms(None) == 2_000
    assert not events(logs, "jobs.wake.live")

    notify(admin, "emails")  # queues still arrive on the open session; only the ceiling waits for proof
    eventually(lambda: (wake.run_once(), "emails" in heard.queues)[1], timeout=WAIT)

    [payload] = swallowed  # a proof that arrives late still proves
    notify(admin, payload)
    eventually(lambda: (wake.run_once(), wake.is_live())[1], timeout=WAIT)
    assert len(events(logs, "jobs.wake.live")) == 1
    assert payload not in heard.queues


def test_a_killed_session_is_lost_then_redialled_and_proven_again(
    make_wake: Callable[..., QueueWake], admin: psycopg.Connection[Any], logs: pytest.LogCaptureFixture
) -> None:
    heard = Heard()
    wake = make_wake(on_wake=heard)
    eventually(wake.is_live, timeout=WAIT)
    pid = wake.session_pid
    assert pid is not None

    admin.execute("select pg_terminate_backend(%s)", [pid])

    [lost] = eventually(lambda: events(logs, "jobs.wake.lost"), timeout=WAIT)
    assert lost.levelno == logging.WARNING
    assert lost.jobs["session_pid"] == pid and lost.jobs["was_live"] is True
    eventually(lambda: wake.is_live() and wake.session_pid not in (None, pid), timeout=WAIT)
    assert len(events(logs, "jobs.wake.live")) == 2
    assert wake.dials == 2

    notify(admin, "after-redial")
    eventually(lambda: "after-redial" in heard.queues, timeout=WAIT)


def test_a_failing_listener_does_not_cost_the_session(
    make_wake: Callable[..., QueueWake], admin: psycopg.Connection[Any], logs: pytest.LogCaptureFixture
) -> None:
    heard = Heard()

    def on_wake(queue: str) -> None:
        if queue == "boom":
            raise RuntimeError("listener bug")
        heard(queue)

    wake = make_wake(on_wake=on_wake)
    eventually(wake.is_live, timeout=WAIT)
    pid = wake.session_pid
    notify(admin, "boom")
    notify(admin, "emails")
    eventually(lambda: "emails" in heard.queues, timeout=WAIT)
    [failed] = events(logs, "jobs.wake.listener-failed")
    assert failed.jobs["queue"] == "boom" and "listener bug" in failed.jobs["error"]
    assert wake.session_pid == pid and wake.is_live()


def test_stop_closes_the_session_and_joins(conninfo: str, admin: psycopg.Connection[Any]) -> None:
    wake = start_queue_wake(
        conninfo=conninfo, probe=pool_probe("default"), on_wake=Heard(), proof_timeout_ms=2_000, read_timeout_ms=20
    )
    eventually(wake.is_live, timeout=WAIT)
    pid = wake.session_pid
    assert pid is not None and backend_alive(admin, pid)

    assert wake.stop(timeout=WAIT) is True  # stop() answers whether its thread joined
    assert not wake.is_live() and wake.session_pid is None
    eventually(lambda: not backend_alive(admin, pid), timeout=WAIT)
    assert wake.stop() is True  # idempotent


def test_stopping_a_proven_wake_is_not_reported_unverified(
    make_wake: Callable[..., QueueWake], logs: pytest.LogCaptureFixture
) -> None:
    clock = FrozenClock()
    wake = make_wake(on_wake=Heard(), clock=clock, proof_timeout_ms=1_000)
    eventually(wake.is_live, timeout=WAIT)
    clock.advance(60_000)  # long past the proof window: stop() clears the live flag, nothing awaits proof
    assert wake.stop(timeout=WAIT) is True
    assert not events(logs, "jobs.wake.unverified")


def _heard(conn: psycopg.Connection[Any], want: int, timeout: float = 5.0) -> list[str]:
    """The queue names announced on ``conn`` (LISTENing), read until ``want`` arrived or ``timeout``."""
    heard: list[str] = []
    for note in conn.notifies(timeout=timeout, stop_after=want):
        heard.append(note.payload)
    return heard


def test_an_enqueue_announces_its_queue_unless_a_due_row_of_it_waits_unclaimed_already(
    admin: psycopg.Connection[Any],
) -> None:
    """Back to back into an idle queue, the first enqueue wakes the workers and the ones behind it, while
    that row still waits, stay silent (the pass that claims it, or the one at the floor after it, takes
    them); once the waiting rows are claimed the next enqueue announces again. A batch announces once per
    queue; a row due an hour out, or a deduped enqueue, announces nothing."""
    from tests.conftest import installed
    from ultimate_jobs import JobRun, job
    from ultimate_jobs.drivers.postgres.driver import PostgresDriver

    admin.execute(f"LISTEN {WAKE_CHANNEL}")
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:

        @job(name="wake_announce", idempotency_key=lambda i: str(i["k"]), tenant="none", queue="wake-q")
        def announced(run: JobRun[Any]) -> None:
            return None

        announced.enqueue({"k": 1})
        announced.enqueue({"k": 2})  # row 1 waits unclaimed: the workers are woken for it already
        assert _heard(admin, 2, timeout=1.0) == ["wake-q"]

        claimed = env.driver.claim(queues=["wake-q"], limit=10, worker_id="w")
        assert len(claimed.jobs) == 2
        announced.enqueue({"k": 3})  # nothing waits now: this one wakes the workers
        assert _heard(admin, 1) == ["wake-q"]

        announced.enqueue({"k": 4}, delay="1h", queue="wake-s")  # due an hour out: nothing to wake for
        announced.enqueue({"k": 3})  # deduped: nothing inserted, nothing announced
        env.driver.enqueue_many([announced.build_request({"k": n}, queue="wake-r") for n in range(20, 25)])
        env.driver.enqueue_many([announced.build_request({"k": n}, queue="wake-t") for n in range(30, 35)])
        # asks for one more than expected: the delayed and the deduped enqueue must not have announced
        assert sorted(_heard(admin, 3, timeout=1.0)) == ["wake-r", "wake-t"]

        announced.enqueue({"k": 5}, queue="wake-s")  # only a row due an hour out waits there: announced
        assert _heard(admin, 1) == ["wake-s"]
