"""Real worker processes on the Redis driver: ``manage.py jobs_worker`` (settings
:mod:`tests.e2e.redis_settings`, jobs :mod:`tests.e2e.redis_jobs`) killed, drained, run side by side,
and carried across a restart of the Redis server under them.

The queue, and the list of what ran, live in the database this test process leases on the shared server
(:mod:`tests.redis_db`; flushed per test); the restart test starts a ``redis-server`` of its own on a
free port with AOF on, and restarts only that.
Every wait is a bounded ``eventually()``; every child still alive at teardown is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection

from tests.e2e.test_postgres_processes import DRAIN_DEADLINE_S
from tests.helpers import POLL_S, START_S, Child, eventually
from tests.redis_db import redis_test_db, redis_test_url
from ultimate_jobs.contracts.operator import JobFilter, JobRecord
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.drivers.redis.driver import client_from_url

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

REPO = Path(__file__).resolve().parents[2]
QUEUE = "e2e-redis"
QUEUE_DB = redis_test_db()
QUEUE_URL = redis_test_url()
EFFECTS_URL = QUEUE_URL  # the bodies' list ``effects``, beside the driver's ``{…}``-tagged keys
BULK_JOBS = 5_000
BULK_BATCH = 500
SHORT_VT = "4s"  # a killed worker's lease lapses soon, yet a loaded machine's heartbeats still land in time

Spawn = Callable[..., Child]


@pytest.fixture
def effects() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(EFFECTS_URL, decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def effect_rows(client: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(e) for e in client.lrange("effects", 0, -1)]


def running(effects: redis.Redis, job_id: str, worker: Child) -> None:
    """Wait until ``worker`` runs the hold job's first attempt (and nothing else ran it)."""
    try:
        eventually(lambda: markers(effects, job_id) == [("running", worker.pid, 1)], timeout=START_S, interval=POLL_S)
    except AssertionError as exc:
        raise AssertionError(f"{markers(effects, job_id)}; {worker.describe()}") from exc


def markers(client: redis.Redis, job_id: str) -> list[tuple[str, int, int]]:
    return [
        (e["key"].split(":", 1)[0], e["pid"], e["attempt"])
        for e in effect_rows(client)
        if e["key"] in (f"running:{job_id}", f"again:{job_id}")
    ]


def make_spawn(url: str) -> Iterator[Spawn]:
    children: list[Child] = []
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "tests.e2e.redis_settings",
        "UJ_REDIS_URL": url,
        "UJ_EFFECTS_URL": EFFECTS_URL,
    }

    def start(name: str, *args: str, vt: str = "30s", **env: str) -> Child:
        child = Child(name, [sys.executable, *args], {**base_env, "UJ_VT": vt, **env})
        children.append(child)
        return child

    try:
        yield start
    finally:
        for child in children:
            child.close()


@pytest.fixture
def spawn(effects: redis.Redis) -> Iterator[Spawn]:
    yield from make_spawn(QUEUE_URL)


def start_workers(spawn: Spawn, *names: str, vt: str = "30s", concurrency: int = 4) -> list[Child]:
    command = ["manage.py", "jobs_worker", "--queues", QUEUE, "--concurrency", str(concurrency)]
    command += ["--drain-deadline", f"{DRAIN_DEADLINE_S:g}s"]
    workers = [spawn(name, *command, vt=vt) for name in names]
    for worker in workers:
        banner = worker.line(0)
        assert banner.startswith("worker ") and f" serving {QUEUE} (" in banner, worker.describe()
        worker.worker_id = banner.split()[1]
    return workers


@pytest.fixture
def jobs() -> Iterator[Any]:
    """The e2e handles, enqueueing through a Redis driver on the queue's database (flushed)."""
    from tests.e2e import redis_jobs

    client = client_from_url(QUEUE_URL)
    client.flushdb()
    set_job_driver(RedisDriver(client))
    try:
        yield redis_jobs
    finally:
        set_job_driver(None)
        for name in ("record_effect", "hold_retry", "hold_once"):
            registry.unregister(name)
        client.flushdb()
        client.close()


def row(job_id: str, url: str = QUEUE_URL) -> JobRecord:
    found = RedisDriver(client_from_url(url)).operator.get(job_id)
    assert found is not None, f"no row {job_id}"
    return found


def row_in(job_id: str, state: str) -> Callable[[], JobRecord]:
    def check() -> JobRecord:
        found = row(job_id)
        assert found.state == state, found
        return found

    return check


@pytest.mark.slow
def test_a_sigkilled_workers_job_is_run_by_another_worker_once_its_lease_lapses(
    spawn: Spawn, jobs: Any, effects: redis.Redis
) -> None:
    job_id = jobs.hold_retry.enqueue({"key": "sigkill-retry"}).id
    (a,) = start_workers(spawn, "A", vt=SHORT_VT)
    running(effects, job_id, a)
    held = row(job_id)
    assert (held.state, held.attempts, held.worker_id) == ("running", 1, a.worker_id)

    a.signal(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    lease_until = row(job_id).lease_until_ms
    assert lease_until is not None
    (b,) = start_workers(spawn, "B", vt=SHORT_VT)

    done = eventually(row_in(job_id, "done"), timeout=20.0, interval=POLL_S)
    assert done.attempts == 2
    assert markers(effects, job_id) == [("running", a.pid, 1), ("again", b.pid, 2)], b.describe()
    again = next(e for e in effect_rows(effects) if e["key"] == f"again:{job_id}")
    assert again["at"] * 1000 >= lease_until, "B re-claimed the row before A's lease lapsed"


@pytest.mark.slow
def test_a_sigkilled_final_attempt_is_buried_dead_by_the_next_claim(
    spawn: Spawn, jobs: Any, effects: redis.Redis
) -> None:
    job_id = jobs.hold_once.enqueue({"key": "sigkill-once"}).id
    (a,) = start_workers(spawn, "A", vt=SHORT_VT)
    running(effects, job_id, a)
    a.signal(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    (b,) = start_workers(spawn, "B", vt=SHORT_VT)

    dead = eventually(row_in(job_id, "dead"), timeout=20.0, interval=POLL_S)
    assert (dead.attempts, dead.max_attempts, dead.last_error) == (1, 1, "LEASE_LAPSED_FINAL_ATTEMPT")
    assert markers(effects, job_id) == [("running", a.pid, 1)], f"the body ran again: {b.describe()}"
    (totals,) = RedisDriver(client_from_url(QUEUE_URL)).operator.counter_totals(0)
    assert (totals.job, totals.dead) == ("hold_once", 1)


@pytest.mark.slow
def test_sigterm_interrupts_the_job_uncounted_and_another_worker_takes_it_at_once(
    spawn: Spawn, jobs: Any, effects: redis.Redis
) -> None:
    (a,) = start_workers(spawn, "A")
    job_id = jobs.hold_retry.enqueue({"key": "sigterm"}).id
    running(effects, job_id, a)
    (b,) = start_workers(spawn, "B")

    sent = time.monotonic()
    a.signal(signal.SIGTERM)
    assert a.wait() == 0, a.describe()
    assert time.monotonic() - sent < DRAIN_DEADLINE_S
    assert "jobs.job.interrupted" in a.stderr, a.describe()

    done = eventually(row_in(job_id, "done"), timeout=15.0, interval=POLL_S)
    assert time.monotonic() - sent < 15.0  # far inside the 30 s visibility timeout: a hand-back
    assert (done.attempts, done.last_code) == (1, "X_DRAINING")  # the drained attempt was not counted
    assert markers(effects, job_id) == [("running", a.pid, 1), ("again", b.pid, 1)], b.describe()
    assert RedisDriver(client_from_url(QUEUE_URL)).operator.counter_totals(0)[0].retried == 0


def all_done(url: str, n: int) -> Callable[[], bool]:
    driver = RedisDriver(client_from_url(url))

    def check() -> bool:
        totals = driver.operator.counter_totals(0)
        return bool(totals and totals[0].done == n)

    return check


@pytest.mark.slow
def test_four_workers_complete_five_thousand_jobs_exactly_once(spawn: Spawn, jobs: Any, effects: redis.Redis) -> None:
    driver = RedisDriver(client_from_url(QUEUE_URL))
    requests = [jobs.record_effect.build_request({"key": f"bulk-{i:05d}"}) for i in range(BULK_JOBS)]
    for start in range(0, BULK_JOBS, BULK_BATCH):
        assert not any(a.deduped for a in driver.enqueue_many(requests[start : start + BULK_BATCH]))
    workers = start_workers(spawn, "W1", "W2", "W3", "W4", concurrency=8)
    try:
        eventually(all_done(QUEUE_URL, BULK_JOBS), timeout=120.0, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{driver.stats()}; {[w.describe() for w in workers]}") from exc

    ran = effect_rows(effects)
    assert len(ran) == BULK_JOBS and len({e["key"] for e in ran}) == BULK_JOBS
    assert {e["attempt"] for e in ran} == {1}
    pids = {e["pid"] for e in ran}
    assert pids <= {w.pid for w in workers} and len(pids) > 1, pids
    assert driver.stats() == []  # no live row left, none dead
    (totals,) = driver.operator.counter_totals(0)
    assert (totals.done, totals.retried, totals.failed, totals.dead) == (BULK_JOBS, 0, 0, 0)
    for worker in workers:
        assert "ERROR" not in worker.stderr, worker.describe()


# -- a restart of the server under the workers -------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """A ``redis-server`` of the test's own: AOF on, fsync on every write, in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: Child | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not on PATH: install the Redis server (apt-get install redis-server)")
        self.proc = Child(
            "redis-server",
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"],
            dict(os.environ),
        )  # fmt: skip
        probe = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        eventually(lambda: probe.ping(), timeout=10.0, interval=0.05)
        probe.close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.slow
def test_workers_reconnect_across_a_redis_restart_and_lose_no_job(
    private_redis: PrivateRedis, effects: redis.Redis, jobs: Any
) -> None:
    n = 2_000
    driver = RedisDriver(client_from_url(private_redis.url))
    requests = [jobs.record_effect.build_request({"key": f"restart-{i:05d}"}) for i in range(n)]
    for start in range(0, n, BULK_BATCH):
        driver.enqueue_many(requests[start : start + BULK_BATCH])
    spawner = make_spawn(private_redis.url)
    spawn = next(spawner)
    try:
        workers = start_workers(spawn, "R1", "R2", vt="2s", concurrency=4)
        eventually(lambda: len(effect_rows(effects)) >= 300, timeout=60.0, interval=0.05)
        private_redis.kill()  # mid-run: rows running, acks in flight
        time.sleep(2.0)  # long enough that the client's own retries give up and the workers see it
        private_redis.start()
        try:
            eventually(all_done(private_redis.url, n), timeout=120.0, interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{driver.stats()}; {[w.describe() for w in workers]}") from exc
        assert {e["key"] for e in effect_rows(effects)} == {f"restart-{i:05d}" for i in range(n)}
        assert driver.stats() == []
        assert driver.operator.list(JobFilter(state="done", limit=1)).rows
        seen = "\n".join(w.stderr for w in workers)
        assert "jobs.worker.pass-failed" in seen and "jobs.wake.lost" in seen, "no worker saw the outage"
        for worker in workers:
            assert worker.popen.poll() is None, worker.describe()  # reconnected, still serving
    finally:
        spawner.close()


IDLE_WARMUP_S = 10.0  # the idle wait doubles 250 ms -> 5 s within the first 8 s
IDLE_WINDOW_S = 15.0  # three 5 s waits: a claim a wait holds it to 3, 12 a minute; a shorter ceiling sends 4 or more


@pytest.mark.slow
def test_an_idle_worker_sends_at_most_twelve_commands_a_minute(spawn: Spawn, jobs: Any) -> None:
    (worker,) = start_workers(spawn, "idle")
    time.sleep(IDLE_WARMUP_S)
    sent: list[str] = []
    monitor_client = redis.Redis.from_url(QUEUE_URL, decode_responses=True)
    with monitor_client.monitor() as monitor:
        ends = time.monotonic() + IDLE_WINDOW_S
        for command in monitor.listen():
            if time.monotonic() >= ends:
                break
            if command.get("db") == QUEUE_DB and command.get("client_type") != "lua":
                sent.append(command["command"].split()[0].upper())
    monitor_client.close()
    per_minute = len(sent) * 60 / IDLE_WINDOW_S
    assert per_minute <= 12, f"{len(sent)} commands in {IDLE_WINDOW_S:g}s: {sent}"
    assert set(sent) == {"EVALSHA"}, sent  # the claims, each carrying the registry row; the wake sends nothing
    assert worker.popen.poll() is None


@pytest.mark.slow
def test_jobs_dev_runs_on_redis_and_drains_on_sigterm(
    spawn: Spawn, jobs: Any, effects: redis.Redis, django_db_setup: None
) -> None:
    # jobs_dev also runs the outbox relay on the Django database (x_outbox), so it starts only on a
    # migrated one: the suite's test database, as a deployment would have run migrate
    migrated = {"ULTIMATE_JOBS_TEST_DB": connection.settings_dict["NAME"]}
    dev = spawn(
        "dev", "manage.py", "jobs_dev", "--queues", QUEUE, "--drain-deadline", f"{DRAIN_DEADLINE_S:g}s", **migrated
    )
    assert dev.line(0).startswith("jobs_dev: "), dev.describe()
    job_id = jobs.record_effect.enqueue({"key": "dev"}).id
    eventually(row_in(job_id, "done"), timeout=START_S, interval=POLL_S)
    held = jobs.hold_retry.enqueue({"key": "dev-drain"}).id
    eventually(lambda: markers(effects, held) == [("running", dev.pid, 1)], timeout=START_S, interval=POLL_S)
    sent = time.monotonic()
    dev.signal(signal.SIGTERM)
    assert dev.wait() == 0, dev.describe()
    assert time.monotonic() - sent < DRAIN_DEADLINE_S
    interrupted = row(held)
    assert (interrupted.state, interrupted.attempts) == ("ready", 0), interrupted
