"""The settle buffer in real ``manage.py jobs_worker`` processes on the test database: a drain flushes
every buffered settle before the process exits, and a SIGKILL loses no settle that landed while the
ones still buffered come back through their leases (at-least-once).

The children run :mod:`tests.e2e.slow_ack_settings`: the Postgres driver of :mod:`tests.e2e.slow_ack`,
whose ``ack_many`` sleeps ``UJ_ACK_DELAY_MS`` first, so completions surely wait in the buffer. The job
is ``record_effect`` of :mod:`tests.e2e.pg_jobs`: each run commits one ``e2e_effects`` row (its key,
pid, attempt and the time) before the body returns. Every wait is a bounded ``eventually()``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pytest

from tests.e2e import test_postgres_processes as processes
from tests.e2e.slow_ack import ACK_DELAY_ENV
from tests.e2e.test_postgres_processes import (
    QUEUE,
    PgJobs,
    Spawn,
    query,
    worker_command,
)
from tests.helpers import EXIT_S, POLL_S, START_S, Child, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

effects_table = processes.effects_table  # the fixtures of the Postgres process tests, shared
spawn = processes.spawn
pg = processes.pg

DRAIN_JOBS = 300
KILL_JOBS = 120
FINISH_S = 90.0  # every job done, on a loaded two-core machine

SlowWorker = Callable[..., Child]


@pytest.fixture
def slow_worker(spawn: Spawn) -> SlowWorker:
    """Start ``manage.py jobs_worker`` children whose acks sleep ``ack_delay_ms``; answers each once it
    printed its banner (``child.worker_id`` set). ``spawn`` SIGKILLs whatever still runs at teardown."""

    def start(name: str, *, ack_delay_ms: int, vt: str = "30s") -> Child:
        args = [*worker_command(), "--settings", "tests.e2e.slow_ack_settings"]
        child = spawn(name, *args, vt=vt, **{ACK_DELAY_ENV: str(ack_delay_ms)})
        banner = child.line(0)
        assert banner.startswith("worker ") and f" serving {QUEUE} (" in banner, child.describe()
        child.worker_id = banner.split()[1]
        return child

    return start


def enqueue(env: PgJobs, prefix: str, count: int) -> list[str]:
    keys = [f"{prefix}-{n:04d}" for n in range(count)]
    answers = env.driver.enqueue_many([env.jobs.record_effect.build_request({"key": k}) for k in keys])
    assert not any(a.deduped for a in answers)
    return keys


@dataclass
class Job:
    """One ``record_effect`` row and the runs its key left in ``e2e_effects``."""

    state: str
    attempts: int
    worker_id: str | None
    last_code: str | None
    finished_at: datetime | None
    runs: list[tuple[int, int, datetime]] = field(default_factory=list)  # (pid, attempt, at), in order


def jobs_by_key() -> dict[str, Job]:
    jobs = {
        key: Job(state, attempts, worker_id, last_code, finished_at)
        for key, state, attempts, worker_id, last_code, finished_at in query(
            "SELECT idempotency_key, state, attempts, worker_id, last_code, finished_at FROM x_jobs "
            "WHERE name = 'record_effect'"
        )
    }
    for key, pid, attempt, at in query("SELECT job_key, worker_pid, attempt, at FROM e2e_effects ORDER BY at"):
        jobs[key].runs.append((pid, attempt, at))
    return jobs


def ran_and_done() -> tuple[int, int]:
    """How many jobs' bodies have run, and how many rows are done, read in one statement."""
    ((ran, done),) = query(
        "SELECT (SELECT count(DISTINCT job_key) FROM e2e_effects), "
        "(SELECT count(*) FROM x_jobs WHERE name = 'record_effect' AND state = 'done')"
    )
    return int(ran), int(done)


def settles_buffered(at_least_done: int) -> Callable[[], bool]:
    """For ``eventually()``: some bodies ran whose settle has not landed yet (and ``at_least_done`` did)."""

    def check() -> bool:
        ran, done = ran_and_done()
        return ran >= 10 and ran > done >= at_least_done

    return check


def no_other_session() -> bool:
    """No session but this one on the test database: a killed worker's statements have all ended."""
    ((others,),) = query(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    return bool(others == 0)


def states(jobs: dict[str, Job]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in jobs.values():
        counts[job.state] = counts.get(job.state, 0) + 1
    return counts


@pytest.mark.slow
def test_a_sigterm_drain_flushes_every_buffered_settle_before_the_process_exits(
    slow_worker: SlowWorker, pg: PgJobs
) -> None:
    enqueue(pg, "drain", DRAIN_JOBS)
    worker = slow_worker("A", ack_delay_ms=300)
    eventually(settles_buffered(0), timeout=START_S, interval=0.02)
    ran_at_signal, done_at_signal = ran_and_done()

    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=3 * EXIT_S) == 0, worker.describe()

    jobs = jobs_by_key()
    ran = {key for key, job in jobs.items() if job.runs}
    never = {key for key, job in jobs.items() if not job.runs}
    handed_back = {key for key in never if jobs[key].last_code == "X_DRAINING"}
    print(
        f"\nSIGTERM drain: at the signal {ran_at_signal} bodies had run, {done_at_signal} rows were done; "
        f"after the exit {len(ran)} ran, {states(jobs)}, {len(handed_back)} of the never-run handed back"
    )
    assert len(jobs) == DRAIN_JOBS
    assert all(len(job.runs) <= 1 for job in jobs.values()), "a body ran twice under one worker"
    for key in ran:
        assert (jobs[key].state, jobs[key].attempts, jobs[key].worker_id) == ("done", 1, worker.worker_id), (
            key,
            jobs[key],
        )
    assert states(jobs).get("done", 0) == len(ran)  # every completion landed, none was lost in the buffer
    assert query("SELECT count(*) FROM x_jobs WHERE state = 'running'") == [(0,)]
    assert never, "every job ran before the drain; nothing was left to hand back"
    for key in never:  # never started: back to ready, the attempt uncounted (its worker kept), or never claimed
        assert (jobs[key].state, jobs[key].attempts) == ("ready", 0), (key, jobs[key])
        assert jobs[key].worker_id in ((worker.worker_id,) if key in handed_back else (worker.worker_id, None))
    assert "settle-flush-timeout" not in worker.stderr, worker.describe()
    assert "ERROR" not in worker.stderr, worker.describe()


@pytest.mark.slow
def test_a_sigkill_loses_no_landed_settle_and_the_buffered_ones_run_again(slow_worker: SlowWorker, pg: PgJobs) -> None:
    enqueue(pg, "kill", KILL_JOBS)
    # each flush outlasts a whole lease window: only the heartbeat, which renews what waits in the buffer,
    # keeps those rows A's until the SIGKILL; then their leases lapse within 2 s
    a = slow_worker("A", ack_delay_ms=3_000, vt="2s")
    eventually(settles_buffered(1), timeout=START_S + 20.0, interval=0.02)  # one flush landed, more wait

    a.signal(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    eventually(no_other_session, timeout=EXIT_S, interval=POLL_S)  # A's last statement has ended
    before = jobs_by_key()
    landed = {key for key, job in before.items() if job.state == "done"}
    lost = {key for key, job in before.items() if job.runs and job.state != "done"}
    unrun = {key for key, job in before.items() if not job.runs and job.state == "running"}
    assert landed and lost, states(before)
    for key, job in before.items():
        assert all(pid == a.pid for pid, _, _ in job.runs), (key, job)
    for key in lost:  # the body ran, the settle never landed: still running under A's lease
        assert (before[key].state, before[key].worker_id) == ("running", a.worker_id), (key, before[key])
    for key in set(before) - landed - lost - unrun:
        assert (before[key].state, before[key].attempts) == ("ready", 0), (key, before[key])

    b = slow_worker("B", ack_delay_ms=200, vt="2s")

    def all_done() -> bool:
        return states(jobs_by_key()) == {"done": KILL_JOBS}

    try:
        eventually(all_done, timeout=FINISH_S, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{states(jobs_by_key())}; {b.describe()}") from exc
    after = jobs_by_key()
    print(
        f"\nSIGKILL: {len(landed)} settles had landed, {len(lost)} were buffered and lost, {len(unrun)} claimed "
        f"jobs had not started, {KILL_JOBS - len(landed) - len(lost) - len(unrun)} unclaimed; after B: "
        f"{sum(len(job.runs) for job in after.values())} runs for {KILL_JOBS} jobs"
    )
    for key in landed:  # a settle that landed is never undone, and the job never runs again
        assert after[key].runs == before[key].runs, (key, after[key])
    for key in lost:  # at-least-once: the lost settle's job ran again, in B
        runs = after[key].runs
        assert runs[: len(before[key].runs)] == before[key].runs and len(runs) == len(before[key].runs) + 1, (key, runs)
        assert len(runs) >= 2 and runs[-1][0] == b.pid, (key, runs)
    for key, job in after.items():
        assert job.runs, (key, job)
        assert job.finished_at is not None and max(at for _, _, at in job.runs) < job.finished_at, (
            f"{key} ran after its settle landed: {job}"
        )
    assert "ERROR" not in b.stderr, b.describe()


@pytest.mark.slow
def test_a_settle_slower_than_the_lease_keeps_the_job_and_no_body_runs_twice(
    slow_worker: SlowWorker, pg: PgJobs
) -> None:
    keys = enqueue(pg, "slow", 80)
    # every flush takes 3 s, longer than the 2 s lease of what it settles: the heartbeat must keep
    # renewing a row whose body returned until its settle lands, or the other worker takes it again
    a = slow_worker("A", ack_delay_ms=3_000, vt="2s")
    b = slow_worker("B", ack_delay_ms=3_000, vt="2s")

    def all_done() -> bool:
        return states(jobs_by_key()) == {"done": len(keys)}

    try:
        eventually(all_done, timeout=FINISH_S, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{states(jobs_by_key())}; {a.describe()}; {b.describe()}") from exc
    jobs = jobs_by_key()
    twice = {key: job.runs for key, job in jobs.items() if len(job.runs) != 1}
    assert not twice, twice
    assert all(job.attempts == 1 for job in jobs.values()), {k: j.attempts for k, j in jobs.items()}
    for child in (a, b):
        assert "jobs.lease.lost" not in child.stderr and "ERROR" not in child.stderr, child.describe()
