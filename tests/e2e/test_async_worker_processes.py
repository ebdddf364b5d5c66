"""Real worker processes running ``async def`` bodies on Postgres: ``manage.py jobs_worker`` (settings
:mod:`tests.e2e.async_settings`, jobs :mod:`tests.e2e.async_jobs`) SIGKILLed with 300 async runs in
flight, drained with SIGTERM, serving sync and async jobs on one queue, and draining 10,000 async jobs
while the test samples its connections to the database.

The children and their helpers are :mod:`tests.e2e.test_postgres_processes`'s (``spawn``, the
``e2e_effects`` table); every wait is a bounded ``eventually()``.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from django.db import connection

from tests.e2e import test_postgres_processes as pg_processes
from tests.e2e.test_postgres_processes import Spawn, query
from tests.helpers import POLL_S, START_S, Child, eventually
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

effects_table = pg_processes.effects_table
spawn = pg_processes.spawn

QUEUE = "e2e-async"
SETTINGS = "tests.e2e.async_settings"
DRAIN_DEADLINE_S = 5.0
IN_FLIGHT = 300
MIXED = 200
BULK = 10_000
BATCH = 500
CONNECTIONS_BOUND = 20
"""The most sessions the worker and this test may hold on the database at once: the worker's claim loop,
heartbeat, settle flusher, wake session, offload threads and ORM thread, this test's two — a handful,
whatever the number of jobs."""
LATE_SESSIONS = 2
"""Sessions a worker may open after its first jobs ran: the heartbeat's, at its first beat."""


@pytest.fixture
def async_e2e() -> Iterator[ModuleType]:
    """Install a Postgres driver on the test database for this process's enqueues; restore after."""
    from tests.e2e import async_jobs

    set_job_driver(PostgresDriver())
    try:
        yield async_jobs
    finally:
        set_job_driver(None)
        for name in ("async_hold", "async_touch", "async_record", "sync_record"):
            registry.unregister(name)  # declared for the children; this process only enqueues


def start_worker(spawn: Spawn, name: str, *flags: str, vt: str = "30s") -> Child:
    """``manage.py jobs_worker`` on ``QUEUE``, answered once it printed ``worker <id> serving …``."""
    argv = ["manage.py", "jobs_worker", "--queues", QUEUE, "--drain-deadline", f"{DRAIN_DEADLINE_S:g}s", *flags]
    worker = spawn(name, *argv, vt=vt, DJANGO_SETTINGS_MODULE=SETTINGS)
    banner = worker.line(0)
    assert banner.startswith("worker ") and f" serving {QUEUE} (" in banner, worker.describe()
    worker.worker_id = banner.split()[1]
    return worker


def enqueue_many(handle: Any, keys: list[str]) -> list[str]:
    driver = PostgresDriver()
    ids: list[str] = []
    for start in range(0, len(keys), BATCH):
        answers = driver.enqueue_many([handle.build_request({"key": k}) for k in keys[start : start + BATCH]])
        ids += [a.id for a in answers]
    return ids


def marks(kind: str) -> int:
    (count,) = query("SELECT count(*) FROM e2e_effects WHERE job_key LIKE %s", [f"{kind}:%"])[0]
    return int(count)


def states(name: str) -> list[tuple[Any, ...]]:
    return query("SELECT state, attempts, count(*) FROM x_jobs WHERE name = %s GROUP BY 1, 2 ORDER BY 1, 2", [name])


@pytest.mark.slow
def test_a_sigkilled_worker_with_300_async_runs_in_flight_loses_none_and_each_reruns_once(
    spawn: Spawn, async_e2e: ModuleType
) -> None:
    ids = enqueue_many(async_e2e.async_hold, [f"kill-{n}" for n in range(IN_FLIGHT)])
    a = start_worker(spawn, "A", "--async-concurrency", f"{QUEUE}=500", vt="2s")
    eventually(lambda: marks("running") == IN_FLIGHT, timeout=60.0, interval=0.2)
    (running,) = query("SELECT count(*) FROM x_jobs WHERE name = 'async_hold' AND state = 'running'")[0]
    assert running == IN_FLIGHT, a.describe()

    a.signal(signal.SIGKILL)  # no drain, no settle: 300 rows stay running under A's leases
    assert a.wait() == -signal.SIGKILL
    b = start_worker(spawn, "B", "--async-concurrency", f"{QUEUE}=500", vt="2s")

    try:
        eventually(lambda: states("async_hold") == [("done", 2, IN_FLIGHT)], timeout=90.0, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{states('async_hold')}; {b.describe()}") from exc
    assert marks("running") == IN_FLIGHT and marks("again") == IN_FLIGHT  # each body ran once more, no more
    again = query("SELECT DISTINCT worker_pid, attempt FROM e2e_effects WHERE job_key LIKE 'again:%'")
    assert again == [(b.pid, 2)]
    assert {i for (i,) in query("SELECT id::text FROM x_jobs WHERE name = 'async_hold'")} == set(ids)
    assert "ERROR" not in b.stderr, b.describe()


@pytest.mark.slow
def test_sigterm_hands_async_runs_back_uncounted_inside_the_deadline_and_another_worker_finishes_them(
    spawn: Spawn, async_e2e: ModuleType
) -> None:
    ids = enqueue_many(async_e2e.async_hold, [f"term-{n}" for n in range(20)])
    a = start_worker(spawn, "A")
    eventually(lambda: marks("running") == len(ids), timeout=START_S, interval=POLL_S)

    sent = time.monotonic()
    a.signal(signal.SIGTERM)
    code = a.wait()
    exited = time.monotonic() - sent
    assert code == 0, a.describe()
    assert exited < DRAIN_DEADLINE_S, f"A exited {exited:.2f}s after SIGTERM; its drain deadline is 5 s"
    assert states("async_hold") == [("ready", 0, len(ids))]  # every attempt handed back, none counted
    (codes,) = query("SELECT array_agg(DISTINCT last_code) FROM x_jobs WHERE name = 'async_hold'")[0]
    assert codes == ["X_DRAINING"]
    assert "drain-abandoned" not in a.stderr, a.describe()

    b = start_worker(spawn, "B")
    eventually(lambda: states("async_hold") == [("done", 1, len(ids))], timeout=START_S, interval=POLL_S)
    assert marks("again") == len(ids), b.describe()


@pytest.mark.slow
def test_one_worker_runs_sync_and_async_jobs_of_one_queue_each_once_on_its_own_kind_of_slot(
    spawn: Spawn, async_e2e: ModuleType
) -> None:
    keys = [f"mixed-{n}" for n in range(MIXED)]
    enqueue_many(async_e2e.sync_record, keys)
    enqueue_many(async_e2e.async_record, keys)
    worker = start_worker(spawn, "M", "--concurrency", "2", "--async-concurrency", "50")

    def all_done() -> bool:
        (done,) = query("SELECT count(*) FROM x_jobs WHERE state = 'done'")[0]
        return bool(done == 2 * MIXED)

    try:
        eventually(all_done, timeout=60.0, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{query('SELECT name, state, count(*) FROM x_jobs GROUP BY 1, 2')}") from exc
    assert states("sync_record") == [("done", 1, MIXED)] and states("async_record") == [("done", 1, MIXED)]
    assert (marks("sync"), marks("async")) == (MIXED, MIXED)  # each body once, on its own kind of slot
    assert query("SELECT count(DISTINCT job_key) FROM e2e_effects") == [(2 * MIXED,)]
    assert "ERROR" not in worker.stderr, worker.describe()


def sessions() -> int:
    (count,) = query("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [connection.settings_dict["NAME"]])[0]
    return int(count)


@pytest.mark.slow
def test_ten_thousand_async_jobs_through_one_worker_hold_a_flat_number_of_connections(
    spawn: Spawn, async_e2e: ModuleType
) -> None:
    enqueue_many(async_e2e.async_touch, [f"bulk-{n}" for n in range(BULK)])
    samples: list[tuple[int, int]] = []  # (jobs done, sessions on the database)
    stop = threading.Event()

    def sample() -> None:
        from django.db import connections

        try:
            while not stop.wait(0.1):
                (done,) = query("SELECT count(*) FROM x_jobs WHERE state = 'done'")[0]
                samples.append((int(done), sessions()))
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample, name="test-sessions")
    worker = start_worker(spawn, "W", "--async-concurrency", f"{QUEUE}=500")
    sampler.start()
    try:
        eventually(lambda: states("async_touch") == [("done", 1, BULK)], timeout=240.0, interval=0.5)
    finally:
        stop.set()
        sampler.join(10)
    assert "ERROR" not in worker.stderr, worker.describe()

    during = [count for done, count in samples if 0 < done < BULK]
    assert len(during) >= 5, f"too few samples while jobs ran: {samples}"
    assert max(during) <= CONNECTIONS_BOUND, samples
    first, last = during[: len(during) // 2], during[len(during) // 2 :]
    # flat: a session per job would add thousands; the heartbeat's own opens at its first beat, maybe late
    assert max(last) <= max(first) + LATE_SESSIONS, f"the sessions grew as jobs ran: {samples}"
