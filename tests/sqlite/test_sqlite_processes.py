"""Real worker processes on one SQLite file: ``manage.py jobs_worker`` (settings
:mod:`tests.sqlite.process_settings` — DRIVER unset, so it follows the database to ``sqlite`` — jobs
:mod:`tests.sqlite.process_jobs`) run side by side, SIGKILLed and drained on the test database file.

The children get ``ULTIMATE_JOBS_SQLITE_DB`` naming the test file, so rows committed here are theirs.
What ran where is read from ``e2e_effects`` (every body writes its key, pid and attempt there) and from
``x_jobs``. Every wait is a bounded ``eventually()``; every child still alive at teardown is SIGKILLed
before the tables are flushed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from django.db import connection

from tests.e2e.test_postgres_processes import DRAIN_DEADLINE_S
from tests.helpers import POLL_S, START_S, Child, eventually
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.drivers.sqlite.rows import hex_id, ms

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

QUEUE = "e2e-lite"
BULK_JOBS = 2_000
BULK_BATCH = 500

Spawn = Callable[..., Child]


def query(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


@pytest.fixture
def lite() -> Iterator[ModuleType]:
    """The effects table, empty; an SQLite driver installed for this process's enqueues; the job handles."""
    from tests.sqlite import process_jobs

    query(process_jobs.EFFECTS_TABLE_SQL)
    query("DELETE FROM e2e_effects")
    set_job_driver(SqliteDriver())
    try:
        yield process_jobs
    finally:
        set_job_driver(None)
        for name in ("lite_record_effect", "lite_hold_retry", "lite_hold_once", "lite_exits"):
            registry.unregister(name)  # declared for the children; this process only enqueues
        query("DELETE FROM e2e_effects")


@pytest.fixture
def spawn(lite: ModuleType) -> Iterator[Spawn]:
    children: list[Child] = []
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "tests.sqlite.process_settings",
        "ULTIMATE_JOBS_SQLITE_DB": str(connection.settings_dict["NAME"]),
    }

    def start(name: str, *, vt: str = "30s", concurrency: int = 4, command: str = "jobs_worker") -> Child:
        args = [sys.executable, "manage.py", command, "--queues", QUEUE, "--concurrency", str(concurrency)]
        args += ["--drain-deadline", f"{DRAIN_DEADLINE_S:g}s"]
        child = Child(name, args, {**base_env, "UJ_VT": vt})
        children.append(child)
        return child

    try:
        yield start
    finally:
        for child in children:
            child.close()


def serving(*workers: Child) -> list[Child]:
    for worker in workers:
        banner = worker.line(0)
        assert banner.startswith("worker ") and f" serving {QUEUE} (" in banner and "driver sqlite" in banner, (
            worker.describe()
        )
        worker.worker_id = banner.split()[1]
    return list(workers)


def job_row(job_id: str) -> dict[str, Any]:
    keys = ("state", "attempts", "worker_id", "last_error", "last_code", "lease_until")
    rows = query(f"SELECT {', '.join(keys)} FROM x_jobs WHERE id = %s", [hex_id(job_id)])
    assert len(rows) == 1, f"x_jobs has {len(rows)} rows for {job_id}"
    return dict(zip(keys, rows[0], strict=True))


def row_in(job_id: str, state: str) -> Callable[[], dict[str, Any]]:
    def check() -> dict[str, Any]:
        row = job_row(job_id)
        assert row["state"] == state, row
        return row

    return check


def markers(job_id: str) -> list[tuple[str, int, int]]:
    rows = query(
        "SELECT job_key, worker_pid, attempt FROM e2e_effects WHERE job_key IN (%s, %s) ORDER BY at",
        [f"running:{job_id}", f"again:{job_id}"],
    )
    return [(key.split(":")[0], pid, attempt) for key, pid, attempt in rows]


def marked_at_ms(job_id: str, kind: str) -> int:
    return int(query("SELECT at FROM e2e_effects WHERE job_key = %s", [f"{kind}:{job_id}"])[0][0] * 1000)


@pytest.mark.slow
def test_two_workers_complete_two_thousand_jobs_on_one_file_exactly_once(spawn: Spawn, lite: ModuleType) -> None:
    requests = [lite.record_effect.build_request({"key": f"bulk-{i:05d}"}) for i in range(BULK_JOBS)]
    driver = SqliteDriver()
    for start in range(0, BULK_JOBS, BULK_BATCH):
        assert not any(a.deduped for a in driver.enqueue_many(requests[start : start + BULK_BATCH]))
    workers = serving(spawn("W1", concurrency=8), spawn("W2", concurrency=8))

    def all_done() -> bool:
        (done,) = query("SELECT count(*) FROM x_jobs WHERE name = 'lite_record_effect' AND state = 'done'")[0]
        return bool(done == BULK_JOBS)

    try:
        eventually(all_done, timeout=120.0, interval=0.5)
    except AssertionError as exc:
        states = query("SELECT state, count(*) FROM x_jobs GROUP BY state ORDER BY state")
        raise AssertionError(f"{states}; {[w.describe() for w in workers]}") from exc

    assert query("SELECT count(*), count(DISTINCT job_key) FROM e2e_effects") == [(BULK_JOBS, BULK_JOBS)]
    assert query("SELECT state, attempts, count(*) FROM x_jobs GROUP BY state, attempts") == [("done", 1, BULK_JOBS)]
    pids = {pid for (pid,) in query("SELECT DISTINCT worker_pid FROM e2e_effects")}
    assert pids == {w.pid for w in workers}, f"not both workers ran jobs: {pids}"
    assert query("SELECT sum(done) FROM x_job_counters WHERE job = 'lite_record_effect'") == [(BULK_JOBS,)]
    for worker in workers:
        assert "ERROR" not in worker.stderr, worker.describe()


@pytest.mark.slow
def test_a_sigkilled_workers_job_is_run_by_another_worker_once_its_lease_lapses(spawn: Spawn, lite: ModuleType) -> None:
    job_id = lite.hold_retry.enqueue({"key": "sigkill-retry"}).id
    (a,) = serving(spawn("A", vt="2s"))
    eventually(lambda: markers(job_id) == [("running", a.pid, 1)], timeout=START_S, interval=POLL_S)
    held = job_row(job_id)
    assert (held["state"], held["attempts"], held["worker_id"]) == ("running", 1, a.worker_id)

    a.signal(signal.SIGKILL)  # no drain, no settle: the row stays running under A's lease
    assert a.wait() == -signal.SIGKILL
    lease_until_ms = ms(job_row(job_id)["lease_until"])
    (b,) = serving(spawn("B", vt="2s"))

    done = eventually(row_in(job_id, "done"), timeout=20.0, interval=POLL_S)
    assert done["attempts"] == 2
    assert markers(job_id) == [("running", a.pid, 1), ("again", b.pid, 2)], b.describe()
    assert marked_at_ms(job_id, "again") >= lease_until_ms, "B re-claimed the row before A's lease lapsed"


@pytest.mark.slow
def test_a_sigkilled_final_attempt_is_buried_dead_by_the_next_claim(spawn: Spawn, lite: ModuleType) -> None:
    job_id = lite.hold_once.enqueue({"key": "sigkill-once"}).id
    (a,) = serving(spawn("A", vt="2s"))
    eventually(lambda: markers(job_id) == [("running", a.pid, 1)], timeout=START_S, interval=POLL_S)

    a.signal(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    assert job_row(job_id)["state"] == "running"
    (b,) = serving(spawn("B", vt="2s"))

    dead = eventually(row_in(job_id, "dead"), timeout=20.0, interval=POLL_S)
    assert (dead["attempts"], dead["last_error"], dead["worker_id"], dead["lease_until"]) == (
        1,
        "LEASE_LAPSED_FINAL_ATTEMPT",
        a.worker_id,  # the last attempt's worker stays on the row
        None,
    )
    assert markers(job_id) == [("running", a.pid, 1)], f"the body ran again: {b.describe()}"
    assert query("SELECT coalesce(sum(dead), 0) FROM x_job_counters WHERE job = 'lite_hold_once'") == [(1,)]


@pytest.mark.slow
def test_sigterm_drains_the_job_uncounted_and_another_worker_takes_it_at_once(spawn: Spawn, lite: ModuleType) -> None:
    (a,) = serving(spawn("A"))  # the default 30 s visibility timeout: a lapse would take that long
    job_id = lite.hold_retry.enqueue({"key": "sigterm"}).id
    eventually(lambda: markers(job_id) == [("running", a.pid, 1)], timeout=START_S, interval=POLL_S)
    (b,) = serving(spawn("B"))

    sent = time.monotonic()
    a.signal(signal.SIGTERM)
    assert a.wait() == 0, a.describe()
    assert time.monotonic() - sent < DRAIN_DEADLINE_S, "A outlived its 5 s drain deadline"
    assert "jobs.job.interrupted" in a.stderr, a.describe()

    done = eventually(row_in(job_id, "done"), timeout=15.0, interval=POLL_S)
    assert time.monotonic() - sent < 15.0  # far inside the 30 s visibility timeout: a hand-back, not a lapse
    assert (done["attempts"], done["last_code"]) == (1, "X_DRAINING")  # the drained attempt was not counted
    assert markers(job_id) == [("running", a.pid, 1), ("again", b.pid, 1)], b.describe()


@pytest.mark.slow
def test_jobs_dev_runs_every_role_on_one_file_and_drains_them_on_sigterm(spawn: Spawn, lite: ModuleType) -> None:
    dev = spawn("dev", command="jobs_dev")
    banner = dev.line(0)
    assert banner.startswith("jobs_dev: JobScheduler, OutboxRelay, JobWorker;"), dev.describe()
    job_id = lite.record_effect.enqueue({"key": "dev"}).id
    eventually(row_in(job_id, "done"), timeout=START_S, interval=POLL_S)
    held = lite.hold_retry.enqueue({"key": "dev-drain"}).id
    eventually(lambda: markers(held) == [("running", dev.pid, 1)], timeout=START_S, interval=POLL_S)

    sent = time.monotonic()
    dev.signal(signal.SIGTERM)
    assert dev.wait() == 0, dev.describe()
    assert time.monotonic() - sent < DRAIN_DEADLINE_S
    interrupted = job_row(held)
    assert (interrupted["state"], interrupted["attempts"]) == ("ready", 0), interrupted  # handed back uncounted


def effect_times(key: str) -> list[tuple[int, float]]:
    """(attempt, at) of every effect row under ``key``, in order."""
    rows = query("SELECT attempt, at FROM e2e_effects WHERE job_key = %s ORDER BY at", [key])
    return [(int(attempt), float(at)) for attempt, at in rows]


@pytest.mark.slow
def test_a_body_that_calls_sys_exit_fails_its_attempt_and_its_only_slot_runs_the_next_job(
    spawn: Spawn, lite: ModuleType
) -> None:
    exiting = lite.exits.enqueue({"key": "sys-exit"}).id
    behind = lite.record_effect.enqueue({"key": "behind-the-exit"}).id
    (worker,) = serving(spawn("A", concurrency=1))

    eventually(row_in(behind, "done"), timeout=START_S, interval=POLL_S)
    (exited_at,) = [at for attempt, at in effect_times(f"exiting:{exiting}") if attempt == 1]
    ((_, ran_at),) = effect_times("behind-the-exit")
    assert ran_at - exited_at < 1.0, "the slot took over a second to run the job behind the sys.exit()"

    dead = eventually(row_in(exiting, "dead"), timeout=START_S, interval=POLL_S)
    assert (dead["attempts"], dead["last_code"]) == (2, "X_JOB_BODY_EXITED")
    assert "builtins.SystemExit(3)" in dead["last_error"]
    assert [attempt for attempt, _ in effect_times(f"exiting:{exiting}")] == [1, 2]  # retried once, then dead
    assert worker.popen.poll() is None, worker.describe()  # sys.exit() in a slot ends no process

    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.describe()
    assert "jobs.job.body-exited" in worker.stderr and "drain-abandoned" not in worker.stderr, worker.describe()
