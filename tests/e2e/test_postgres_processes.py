"""Real worker processes against Postgres: ``manage.py jobs_worker`` (settings
:mod:`tests.e2e.pg_settings`, jobs :mod:`tests.e2e.pg_jobs`) killed, drained and run side by side on
the test database.

The children are not under pytest-django: they get ``ULTIMATE_JOBS_TEST_DB`` naming the test database
itself (``connection.settings_dict["NAME"]``, already ``test_…``), so rows committed here are theirs.
What ran where is read from ``e2e_effects`` (every body writes its job key, pid and attempt there)
and from ``x_jobs`` with SQL. Every wait is a bounded ``eventually()``; every child still alive at
teardown is SIGKILLed before the database is flushed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.db import connection

from tests.helpers import EXIT_S, POLL_S, START_S, Child, eventually
from ultimate_jobs.cli.reload import WATCH_POLL_S
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
QUEUE = "e2e-pg"
DRAIN_DEADLINE_S = 5.0
RACE_LOCK = 0x75E2E5  # the advisory lock both racing enqueuers queue behind
RACE_ROUNDS = 20
BULK_JOBS = 5_000
BULK_BATCH = 500


Spawn = Callable[..., Child]


@pytest.fixture
def effects_table() -> Iterator[None]:
    """``e2e_effects``, empty — not a model, so the flush after each test leaves it alone; emptied here."""
    from tests.e2e.pg_jobs import EFFECTS_TABLE_SQL

    with connection.cursor() as cursor:
        cursor.execute(EFFECTS_TABLE_SQL)
        cursor.execute("TRUNCATE e2e_effects")
    yield
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE e2e_effects")


@pytest.fixture
def spawn(effects_table: None) -> Iterator[Spawn]:
    """Start children on the test database with the Postgres settings; SIGKILL whatever still runs at
    teardown (before ``e2e_effects`` is emptied and the tables are flushed)."""
    children: list[Child] = []
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "tests.e2e.pg_settings",
        "ULTIMATE_JOBS_TEST_DB": connection.settings_dict["NAME"],
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


def worker_command(*flags: str, concurrency: int = 4) -> list[str]:
    """``manage.py jobs_worker`` on ``QUEUE`` with ``concurrency`` slots and the 5 s drain deadline."""
    return [
        "manage.py",
        "jobs_worker",
        "--queues",
        QUEUE,
        "--concurrency",
        str(concurrency),
        "--drain-deadline",
        f"{DRAIN_DEADLINE_S:g}s",
        *flags,
    ]


def start_workers(spawn: Spawn, *names: str, vt: str = "30s", concurrency: int = 4, **env: str) -> list[Child]:
    """``manage.py jobs_worker`` per name (``env`` added to each child's environment), all started before
    any is waited for; answers them once each has printed ``worker <id> serving …`` (``child.worker_id``
    set)."""
    workers = [spawn(name, *worker_command(concurrency=concurrency), vt=vt, **env) for name in names]
    for worker in workers:
        banner = worker.line(0)
        assert banner.startswith("worker ") and f" serving {QUEUE} (" in banner, worker.describe()
        worker.worker_id = banner.split()[1]
    return workers


@dataclass
class PgJobs:
    """The Postgres driver installed in this process, and the e2e job handles."""

    driver: PostgresDriver
    jobs: ModuleType


@pytest.fixture
def pg() -> Iterator[PgJobs]:
    """Install a Postgres driver on the test database for this process's enqueues; restore after."""
    from tests.e2e import pg_jobs

    driver = PostgresDriver()
    set_job_driver(driver)
    try:
        yield PgJobs(driver, pg_jobs)
    finally:
        set_job_driver(None)
        for name in ("record_effect", "hold_retry", "hold_once", "work_through", "atomic_effect"):
            registry.unregister(name)  # declared for the children; this process only enqueues


def query(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def job_row(job_id: str) -> dict[str, Any]:
    rows = query(
        "SELECT state, attempts, max_attempts, worker_id, last_error, last_code, lease_until FROM x_jobs WHERE id = %s",
        [job_id],
    )
    assert len(rows) == 1, f"x_jobs has {len(rows)} rows for {job_id}"
    keys = ("state", "attempts", "max_attempts", "worker_id", "last_error", "last_code", "lease_until")
    return dict(zip(keys, rows[0], strict=True))


def row_in(job_id: str, state: str) -> Callable[[], dict[str, Any]]:
    """For ``eventually()``: the row once it is in ``state`` (an AssertionError, "not yet", before)."""

    def check() -> dict[str, Any]:
        row = job_row(job_id)
        assert row["state"] == state, row
        return row

    return check


def markers(job_id: str) -> list[tuple[str, int, int]]:
    """The hold body's marks for one job, in order: ``(running|again, pid, attempt)``."""
    rows = query(
        "SELECT split_part(job_key, ':', 1), worker_pid, attempt FROM e2e_effects "
        "WHERE job_key IN (%s, %s) ORDER BY at, job_key DESC",
        [f"running:{job_id}", f"again:{job_id}"],
    )
    return [(kind, pid, attempt) for kind, pid, attempt in rows]


def marked_at(job_id: str, kind: str) -> Any:
    return query("SELECT at FROM e2e_effects WHERE job_key = %s", [f"{kind}:{job_id}"])[0][0]


@pytest.mark.slow
def test_a_sigkilled_workers_job_is_run_by_another_worker_once_its_lease_lapses(spawn: Spawn, pg: PgJobs) -> None:
    job_id = pg.jobs.hold_retry.enqueue({"key": "sigkill-retry"}).id
    (a,) = start_workers(spawn, "A", vt="2s")
    eventually(lambda: markers(job_id) == [("running", a.pid, 1)], timeout=START_S, interval=POLL_S)
    held = job_row(job_id)
    assert (held["state"], held["attempts"], held["worker_id"]) == ("running", 1, a.worker_id)

    a.signal(signal.SIGKILL)  # no drain, no settle: the row stays running under A's lease
    assert a.wait() == -signal.SIGKILL
    lease_until = job_row(job_id)["lease_until"]
    (b,) = start_workers(spawn, "B", vt="2s")

    done = eventually(row_in(job_id, "done"), timeout=20.0, interval=POLL_S)
    assert done["attempts"] == 2
    assert markers(job_id) == [("running", a.pid, 1), ("again", b.pid, 2)], b.describe()
    assert marked_at(job_id, "again") >= lease_until, "B re-claimed the row before A's lease lapsed"


@pytest.mark.slow
def test_a_sigkilled_final_attempt_is_buried_dead_by_the_next_claim(spawn: Spawn, pg: PgJobs) -> None:
    job_id = pg.jobs.hold_once.enqueue({"key": "sigkill-once"}).id
    (a,) = start_workers(spawn, "A", vt="2s")
    eventually(lambda: markers(job_id) == [("running", a.pid, 1)], timeout=START_S, interval=POLL_S)

    a.signal(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    assert job_row(job_id)["state"] == "running"
    (b,) = start_workers(spawn, "B", vt="2s")

    dead = eventually(row_in(job_id, "dead"), timeout=20.0, interval=POLL_S)
    assert (dead["attempts"], dead["max_attempts"], dead["last_error"]) == (1, 1, "LEASE_LAPSED_FINAL_ATTEMPT")
    assert (dead["worker_id"], dead["lease_until"]) == (a.worker_id, None)  # the last attempt's worker stays
    assert markers(job_id) == [("running", a.pid, 1)], f"the body ran again: {b.describe()}"
    counted = query("SELECT coalesce(sum(dead), 0) FROM x_job_counters WHERE job = 'hold_once'")
    assert counted == [(1,)]


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["after-write", "after-checkpoint"])
def test_a_worker_killed_inside_a_transactional_step_leaves_neither_write_nor_checkpoint(
    spawn: Spawn, pg: PgJobs, tmp_path: Path, kill: str
) -> None:
    """SIGKILL inside ``run.step.atomic``'s transaction — after the effect's write, or after the checkpoint's
    too, just before the commit: Postgres rolls both back, and the next worker runs the step once more —
    one effect in all, from attempt 2."""
    ran = tmp_path / "ran"
    job_id = pg.jobs.atomic_effect.enqueue({"key": f"atomic-{kill}", "kill": kill, "ran": str(ran)}).id
    (a,) = start_workers(spawn, "A", vt="2s")
    assert a.wait(timeout=START_S) == -signal.SIGKILL, a.describe()  # it killed itself inside the step
    assert query("SELECT count(*) FROM e2e_effects WHERE job_key = %s", [f"atomic:atomic-{kill}"]) == [(0,)]
    assert query("SELECT count(*) FROM x_job_steps WHERE job_id = %s", [job_id]) == [(0,)]

    (b,) = start_workers(spawn, "B", vt="2s")
    done = eventually(row_in(job_id, "done"), timeout=20.0, interval=POLL_S)
    assert done["attempts"] == 2, b.describe()
    effects = query("SELECT worker_pid, attempt FROM e2e_effects WHERE job_key = %s", [f"atomic:atomic-{kill}"])
    assert effects == [(b.pid, 2)]  # attempt 1's write rolled back; attempt 2's is the one
    assert ran.read_text().split("\n")[:-1] == [f"{a.pid} 1", f"{b.pid} 2"]  # the step ran again, once
    assert query("SELECT output::int FROM x_job_steps WHERE job_id = %s AND name = 'write'", [job_id]) == [(2,)]


def starts_in_any_second(instants: list[float]) -> int:
    """The most instants (seconds) inside any one-second window, each window opening at an instant."""
    ordered = sorted(instants)
    return max(sum(1 for t in ordered[i:] if t < start + 1.0) for i, start in enumerate(ordered))


@pytest.mark.slow
def test_three_workers_hold_a_rate_limit_across_the_fleet(spawn: Spawn, pg: PgJobs) -> None:
    """``rate_limit="10/s"`` on one key, three worker processes of 4 slots each, 40 jobs: no second ever
    holds more than 10 starts (+1 at the window's edge), the rate comes out near 10 a second, and every
    job ran on its first attempt (a run handed back to its reserved instant spends none)."""
    workers = start_workers(spawn, "A", "B", "C")
    pg.driver.enqueue_many([pg.jobs.rate_limited.build_request({"n": n}) for n in range(40)])
    eventually(lambda: query("SELECT count(*) FROM x_jobs WHERE state = 'done'") == [(40,)], timeout=30.0,
               interval=POLL_S)  # fmt: skip
    starts = [at.timestamp() for (at,) in query("SELECT at FROM e2e_effects WHERE job_key LIKE 'rate:%%'")]
    assert len(starts) == 40
    assert starts_in_any_second(starts) <= 11, sorted(starts)
    rate = (len(starts) - 1) / (max(starts) - min(starts))
    assert rate >= 0.8 * 10, rate  # the limit's rate, not a trickle (the processes share one box)
    assert query("SELECT DISTINCT attempts FROM x_jobs") == [(1,)]
    ran_on = {pid for (pid,) in query("SELECT DISTINCT worker_pid FROM e2e_effects")}
    assert len(ran_on) >= 2, [w.describe() for w in workers]  # the fleet shared it


@pytest.mark.slow
def test_three_workers_run_at_most_two_jobs_of_one_org_at_once(spawn: Spawn, pg: PgJobs) -> None:
    """``LIMITS["FLEET_PER_TENANT"] = {queue: 2}`` in every worker process: org A's 8 jobs never run more
    than 2 at once across three processes of 4 slots, while org B's run beside them."""
    start_workers(spawn, "A", "B", "C", UJ_FLEET_PER_TENANT=f"{QUEUE}=2")
    requests = [pg.jobs.org_capped.build_request({"org": "org-a", "n": n}) for n in range(8)]
    requests += [pg.jobs.org_capped.build_request({"org": "org-b", "n": n}) for n in range(2)]
    pg.driver.enqueue_many(requests)
    eventually(lambda: query("SELECT count(*) FROM x_jobs WHERE state = 'done'") == [(10,)], timeout=30.0,
               interval=POLL_S)  # fmt: skip
    spans: dict[str, list[tuple[float, float]]] = {}
    rows = query("SELECT job_key, at FROM e2e_effects WHERE job_key LIKE 'cap:%%'")
    marks = {key: at.timestamp() for key, at in rows}
    for key in marks:
        if key.endswith(":start"):
            org = key.split(":")[1]
            spans.setdefault(org, []).append((marks[key], marks[key.removesuffix(":start") + ":end"]))

    def most_at_once(intervals: list[tuple[float, float]]) -> int:
        return max(sum(1 for s, e in intervals if s <= start < e) for start, _ in intervals)

    assert len(spans["org-a"]) == 8 and most_at_once(spans["org-a"]) == 2
    a_start, a_end = min(s for s, _ in spans["org-a"]), max(e for _, e in spans["org-a"])
    assert all(a_start < s < a_end for s, _ in spans["org-b"])  # org B was not held behind org A
    assert query("SELECT DISTINCT attempts FROM x_jobs") == [(1,)]


@pytest.mark.slow
def test_sigterm_interrupts_the_job_uncounted_and_another_worker_takes_it_at_once(spawn: Spawn, pg: PgJobs) -> None:
    (a,) = start_workers(spawn, "A")  # the default 30 s visibility timeout: a lapse would take that long
    job_id = pg.jobs.hold_retry.enqueue({"key": "sigterm"}).id
    eventually(lambda: markers(job_id) == [("running", a.pid, 1)], timeout=START_S, interval=POLL_S)
    (b,) = start_workers(spawn, "B")

    sent = time.monotonic()
    a.signal(signal.SIGTERM)
    code = a.wait()
    exited = time.monotonic() - sent
    assert code == 0, a.describe()
    assert exited < DRAIN_DEADLINE_S, f"A exited {exited:.2f}s after SIGTERM; its drain deadline is 5 s"
    assert "jobs.job.interrupted" in a.stderr, a.describe()

    done = eventually(row_in(job_id, "done"), timeout=15.0, interval=POLL_S)
    picked_up = time.monotonic() - sent
    assert picked_up < 15.0  # far inside the 30 s visibility timeout: a hand-back, not a lapse
    assert (done["attempts"], done["last_code"]) == (1, "X_DRAINING")  # the drained attempt was not counted
    assert markers(job_id) == [("running", a.pid, 1), ("again", b.pid, 1)], b.describe()


@pytest.mark.slow
def test_four_workers_complete_five_thousand_jobs_exactly_once(spawn: Spawn, pg: PgJobs) -> None:
    requests = [pg.jobs.record_effect.build_request({"key": f"bulk-{i:05d}"}) for i in range(BULK_JOBS)]
    for start in range(0, BULK_JOBS, BULK_BATCH):
        answers = pg.driver.enqueue_many(requests[start : start + BULK_BATCH])
        assert not any(a.deduped for a in answers)
    workers = start_workers(spawn, "W1", "W2", "W3", "W4", concurrency=8)

    def all_done() -> bool:
        (done,) = query("SELECT count(*) FROM x_jobs WHERE name = 'record_effect' AND state = 'done'")[0]
        return bool(done == BULK_JOBS)

    try:
        eventually(all_done, timeout=120.0, interval=0.5)
    except AssertionError as exc:
        states = query("SELECT state, count(*) FROM x_jobs GROUP BY state ORDER BY state")
        raise AssertionError(f"{states}; {[w.describe() for w in workers]}") from exc

    assert query("SELECT count(*), count(DISTINCT job_key) FROM e2e_effects") == [(BULK_JOBS, BULK_JOBS)]
    assert query("SELECT state, attempts, count(*) FROM x_jobs GROUP BY state, attempts") == [("done", 1, BULK_JOBS)]
    pids = {pid for (pid,) in query("SELECT DISTINCT worker_pid FROM e2e_effects")}
    assert pids <= {w.pid for w in workers}
    assert len(pids) > 1, f"one worker ran every job: {pids}"
    assert query("SELECT sum(done) FROM x_job_counters WHERE job = 'record_effect'") == [(BULK_JOBS,)]
    for worker in workers:
        assert "ERROR" not in worker.stderr, worker.describe()


@pytest.mark.slow
def test_two_processes_enqueueing_one_key_at_once_make_one_live_row(spawn: Spawn, pg: PgJobs) -> None:
    racers = [spawn(name, "-m", "tests.e2e.pg_enqueue", str(RACE_LOCK)) for name in ("R1", "R2")]
    for racer in racers:
        assert racer.line(0) == "READY", racer.describe()

    def queued_behind_the_lock() -> bool:
        (waiting,) = query(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = %s "
            "AND mode = 'ShareLock' AND NOT granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [RACE_LOCK],
        )[0]
        return bool(waiting == len(racers))

    for round_ in range(1, RACE_ROUNDS + 1):
        key = f"race-{round_}"
        query("SELECT pg_advisory_lock(%s)", [RACE_LOCK])
        try:
            for racer in racers:
                racer.send(key)
            eventually(queued_behind_the_lock, timeout=10.0, interval=0.005)
        finally:
            query("SELECT pg_advisory_unlock(%s)", [RACE_LOCK])  # both racers go at once
        answers = [json.loads(racer.line(round_, timeout=10.0)) for racer in racers]

        assert [a["key"] for a in answers] == [key, key]
        assert answers[0]["id"] == answers[1]["id"], answers
        assert answers[0]["run_id"] == answers[1]["run_id"], answers
        assert sorted(a["deduped"] for a in answers) == [False, True], answers
        rows = query("SELECT id::text, state FROM x_jobs WHERE name = 'record_effect' AND idempotency_key = %s", [key])
        assert rows == [(answers[0]["id"], "ready")], (round_, rows)


def test_jobs_dev_runs_every_role_and_drains_them_on_sigterm(spawn: Spawn, pg: PgJobs) -> None:
    dev = spawn("dev", "manage.py", "jobs_dev", "--queues", QUEUE, "--drain-deadline", f"{DRAIN_DEADLINE_S:g}s")
    banner = dev.line(0)
    assert banner.startswith("jobs_dev: JobScheduler, OutboxRelay, JobWorker;"), dev.describe()
    job_id = pg.jobs.record_effect.enqueue({"key": "dev"}).id
    eventually(row_in(job_id, "done"), timeout=START_S, interval=POLL_S)
    held = pg.jobs.hold_retry.enqueue({"key": "dev-drain"}).id
    eventually(lambda: markers(held) == [("running", dev.pid, 1)], timeout=START_S, interval=POLL_S)

    sent = time.monotonic()
    dev.signal(signal.SIGTERM)
    assert dev.wait() == 0, dev.describe()
    assert time.monotonic() - sent < DRAIN_DEADLINE_S
    interrupted = job_row(held)
    assert (interrupted["state"], interrupted["attempts"]) == ("ready", 0), interrupted  # handed back uncounted


def test_a_worker_serves_its_job_counters_on_the_metrics_port(spawn: Spawn, pg: PgJobs) -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = spawn("M", "manage.py", "jobs_worker", "--queues", QUEUE, "--metrics-port", str(port))
    assert worker.line(0).startswith("worker "), worker.describe()
    job_id = pg.jobs.record_effect.enqueue({"key": "metrics"}).id
    eventually(row_in(job_id, "done"), timeout=START_S, interval=POLL_S)

    def scraped() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def counted() -> str:
        text = scraped()
        return text if f'jobs_total{{outcome="ok",queue="{QUEUE}"}} 1.0' in text else ""

    text = eventually(counted, timeout=START_S, interval=POLL_S)
    assert f'job_leases_lost_total{{queue="{QUEUE}"}} 0.0' in text


# ``python -c IGNORING_SIGINT manage.py …`` starts ``manage.py …`` with SIGINT ignored, as a non-interactive
# shell starts a background job (a CI script's ``make test &``): Python then leaves SIGINT ignored, so a
# process that does not install its own handler never hears Ctrl-C.
IGNORING_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


# Every ``jobs_dev --reload`` watches tests/e2e/pg_jobs.py, which one of them touches: under pytest-xdist
# they run on one worker, one after another, so the touch restarts only its own test's roles.
ONE_RELOADER_AT_A_TIME = pytest.mark.xdist_group("jobs_dev_reload")


def start_dev_reload(spawn: Spawn, *, drain_deadline_s: float = DRAIN_DEADLINE_S) -> tuple[Child, int]:
    """``jobs_dev --reload`` with the drain deadline (5 s unless told), started with SIGINT ignored; answers
    the reloader and the pid of its roles' process once the roles serve."""
    dev = spawn(
        "dev-reload", "-c", IGNORING_SIGINT, "manage.py", "jobs_dev", "--reload", "--queues", QUEUE,
        "--drain-deadline", f"{drain_deadline_s:g}s", UJ_LOG_LEVEL="INFO",
    )  # fmt: skip
    assert dev.line(0).startswith("jobs_dev: JobScheduler, OutboxRelay, JobWorker;"), dev.describe()
    (roles,) = eventually(lambda: _children_of(dev.pid), timeout=START_S, interval=POLL_S)
    return dev, roles


def hold_a_job(pg: PgJobs, pid: int, key: str) -> str:
    """Enqueue a job that holds its slot until its signal is aborted, and wait until process ``pid`` runs it."""
    job_id = str(pg.jobs.hold_retry.enqueue({"key": key}).id)
    eventually(lambda: markers(job_id) == [("running", pid, 1)], timeout=START_S, interval=POLL_S)
    return job_id


def assert_drained_and_gone(dev: Child, roles: int, held: str, sent: float, *, within: float) -> None:
    """The roles drained within the drain deadline — ``jobs.dev.stopped`` says ``finished`` (nothing was
    abandoned at the deadline) and the held job was handed back uncounted (a drain, not a kill) — and
    neither process of ``jobs_dev --reload`` runs ``within`` seconds after ``sent``, plus the time a process
    may take to exit once its roles are stopped (``EXIT_S``: interpreter shutdown on a loaded machine)."""
    left = sent + within + EXIT_S - time.monotonic()
    try:
        eventually(lambda: dev.popen.poll() is not None and not _running(roles), timeout=left, interval=POLL_S)
    except AssertionError as exc:
        raise AssertionError(f"still running {within + EXIT_S:g}s after the signal: {dev.describe()}") from exc
    assert "INFO jobs.dev.stopped {'roles': 3, 'finished': True}" in dev.stderr, dev.describe()
    row = job_row(held)
    assert (row["state"], row["attempts"]) == ("ready", 0), (row, dev.describe())


@pytest.mark.slow
@ONE_RELOADER_AT_A_TIME
def test_jobs_dev_reload_drains_and_restarts_the_roles_when_code_changes(spawn: Spawn, pg: PgJobs) -> None:
    dev, first = start_dev_reload(spawn)
    job_id = pg.jobs.record_effect.enqueue({"key": "before-reload"}).id
    eventually(row_in(job_id, "done"), timeout=START_S, interval=POLL_S)
    watched = REPO / "tests" / "e2e" / "pg_jobs.py"  # a module the roles imported (MODULES)
    time.sleep(1.1)  # the stat reloader compares whole-second mtimes it polls each second
    os.utime(watched)
    changed = dev.line(1)
    assert changed.startswith("jobs_dev: ") and "pg_jobs.py changed; draining, then restarting" in changed
    assert dev.line(2).startswith("jobs_dev: JobScheduler, OutboxRelay, JobWorker;"), dev.describe()
    (second,) = eventually(lambda: [p for p in _children_of(dev.pid) if p != first], timeout=START_S, interval=POLL_S)
    assert not _running(first)
    held = hold_a_job(pg, second, "held-after-reload")

    sent = time.monotonic()
    dev.signal_group(signal.SIGINT)  # Ctrl-C in its terminal: both processes hear it (the roles' one twice)
    assert_drained_and_gone(dev, second, held, sent, within=DRAIN_DEADLINE_S)
    assert dev.popen.returncode == 0, dev.describe()


@pytest.mark.slow
@ONE_RELOADER_AT_A_TIME
@pytest.mark.parametrize("stop", ["SIGINT to the reloader", "the reloader SIGKILLed"])
def test_jobs_dev_reload_drains_its_roles_when_the_reloader_is_stopped_or_killed(
    spawn: Spawn, pg: PgJobs, stop: str
) -> None:
    dev, roles = start_dev_reload(spawn)
    held = hold_a_job(pg, roles, f"held-{stop}")

    sent = time.monotonic()
    if stop == "SIGINT to the reloader":  # kill -INT <reloader>: it passes the signal on and waits
        dev.signal(signal.SIGINT)
        assert_drained_and_gone(dev, roles, held, sent, within=DRAIN_DEADLINE_S)
        assert dev.popen.returncode == 0, dev.describe()
    else:  # the orphan notices its parent changed and drains by itself
        dev.signal(signal.SIGKILL)
        assert_drained_and_gone(dev, roles, held, sent, within=DRAIN_DEADLINE_S + WATCH_POLL_S)
        assert "jobs_dev: the reloader is gone; draining, then exiting" in dev.finished_lines(), dev.describe()


# The drain deadline of the Ctrl-C test: far past the body's WORK_S, so a loaded machine's slowness never
# reaches it; the test asserts what the drain did (the job completed, once), never how long it took.
WORK_DRAIN_DEADLINE_S = 60.0


@ONE_RELOADER_AT_A_TIME
@pytest.mark.parametrize("ctrl_c", ["SIGINT to the reloader", "SIGINT to the process group"])
def test_jobs_dev_reload_on_ctrl_c_lets_the_job_in_flight_complete_then_exits(
    spawn: Spawn, pg: PgJobs, ctrl_c: str
) -> None:
    dev, roles = start_dev_reload(spawn, drain_deadline_s=WORK_DRAIN_DEADLINE_S)
    job_id = str(pg.jobs.work_through.enqueue({"key": f"work-{ctrl_c}"}).id)
    eventually(lambda: markers(job_id) == [("running", roles, 1)], timeout=START_S, interval=POLL_S)

    if ctrl_c == "SIGINT to the reloader":
        dev.signal(signal.SIGINT)
    else:  # a terminal's Ctrl-C: the reloader and the roles' process both hear it
        dev.signal_group(signal.SIGINT)

    def exited() -> bool:
        return dev.popen.poll() is not None and not _running(roles)

    try:
        eventually(exited, timeout=WORK_DRAIN_DEADLINE_S + EXIT_S, interval=POLL_S)
    except AssertionError as exc:
        raise AssertionError(f"still running: {dev.describe()}") from exc
    assert dev.popen.returncode == 0, dev.describe()
    assert "INFO jobs.dev.stopped {'roles': 3, 'finished': True}" in dev.stderr, dev.describe()
    row = job_row(job_id)  # settled by the drain itself, before the exit: no later worker re-ran it
    assert (row["state"], row["attempts"], row["last_code"]) == ("done", 1, None), (row, dev.describe())
    assert markers(job_id) == [("running", roles, 1)], dev.describe()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _children_of(pid: int) -> list[int]:
    """The live child pids of ``pid`` (the autoreloader's parent runs the roles in a child process)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found += [int(p) for p in text.split()]
    return found
