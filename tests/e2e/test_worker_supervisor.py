"""``manage.py jobs_worker --processes N`` as real processes against Postgres: the supervisor's children
share a backlog, a SIGKILLed child is replaced, ``--max-jobs`` recycles a child, SIGTERM drains them all.

The children print ``worker <host>-<pid>-<hex> serving …`` on the supervisor's stdout, and register in
``x_workers`` once they claim; that is how the test knows which pids are children. What ran where is read
from ``e2e_effects`` (every body writes its job key and pid). Every wait is a bounded ``eventually()``; a
supervisor still running at teardown gets SIGTERM (its children drain), then the ``spawn`` fixture
SIGKILLs whatever is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.test_postgres_processes import (  # noqa: F401 - fixtures
    DRAIN_DEADLINE_S,
    QUEUE,
    PgJobs,
    Spawn,
    effects_table,
    job_row,
    markers,
    pg,
    query,
    row_in,
    spawn,
    worker_command,
)
from tests.helpers import POLL_S, START_S, Child, eventually
from ultimate_jobs.worker.supervisor import STOP_MARGIN_S

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

STOP_BOUND_S = DRAIN_DEADLINE_S + STOP_MARGIN_S  # the supervisor's documented bound after SIGTERM

Supervise = Callable[..., Child]


@dataclass
class Fleet:
    """``start(*flags)`` runs ``jobs_worker --processes …``; ``pg`` enqueues from this process."""

    start: Supervise
    pg: PgJobs


@pytest.fixture
def fleet(request: pytest.FixtureRequest) -> Iterator[Fleet]:
    """``start`` runs ``jobs_worker`` on ``QUEUE`` with a 5 s drain deadline and answers the supervisor
    once it printed its banner (the ``spawn`` and ``pg`` fixtures of the Postgres process tests, looked
    up by name). Teardown SIGTERMs a supervisor still running and waits for it."""
    start_child: Spawn = request.getfixturevalue("spawn")
    jobs: PgJobs = request.getfixturevalue("pg")
    started: list[Child] = []

    def start(*flags: str, concurrency: int = 1, vt: str = "30s") -> Child:
        supervisor = start_child("supervisor", *worker_command(*flags, concurrency=concurrency), vt=vt)
        started.append(supervisor)
        assert supervisor.line(0).startswith(f"supervisor {supervisor.pid} running "), supervisor.describe()
        return supervisor

    yield Fleet(start, jobs)
    for supervisor in started:
        if supervisor.popen.poll() is None:
            supervisor.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):  # spawn's teardown SIGKILLs it
                supervisor.wait(STOP_BOUND_S + 5)


def children(supervisor: Child) -> list[int]:
    """Every child pid the supervisor has started so far, in start order (from the children's banners)."""
    return [int(line.split()[1].rsplit("-", 2)[1]) for line in supervisor.lines if line.startswith("worker ")]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by the supervisor, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def registered() -> set[int]:
    """The pids of the workers in the ``x_workers`` registry (a worker writes its row at start)."""
    return {pid for (pid,) in query("SELECT pid FROM x_workers")}


def serving(supervisor: Child, count: int) -> list[int]:
    """Wait until ``count`` children run and are registered; answers their pids."""

    def ready() -> list[int]:
        live = [pid for pid in children(supervisor) if alive(pid)]
        assert len(live) == count and set(live) <= registered(), (live, registered(), supervisor.describe())
        return live

    return eventually(ready, timeout=START_S, interval=POLL_S)


def enqueue_effects(jobs: PgJobs, prefix: str, count: int) -> None:
    requests = [jobs.jobs.record_effect.build_request({"key": f"{prefix}-{i:04d}"}) for i in range(count)]
    for start in range(0, count, 500):
        assert not any(a.deduped for a in jobs.driver.enqueue_many(requests[start : start + 500]))


def effects_done(prefix: str, count: int) -> Callable[[], bool]:
    def check() -> bool:
        (done,) = query(
            "SELECT count(*) FROM x_jobs WHERE name = 'record_effect' AND state = 'done' AND idempotency_key LIKE %s",
            [f"{prefix}-%"],
        )[0]
        return bool(done == count)

    return check


def ran_once_each(prefix: str, count: int) -> dict[int, int]:
    """Assert every job of ``prefix`` ran exactly once; answers how many each pid ran."""
    assert query(
        "SELECT count(*), count(DISTINCT job_key) FROM e2e_effects WHERE job_key LIKE %s", [f"{prefix}-%"]
    ) == [(count, count)]
    rows = query(
        "SELECT worker_pid, count(*) FROM e2e_effects WHERE job_key LIKE %s GROUP BY worker_pid", [f"{prefix}-%"]
    )
    return dict(rows)


def stop(supervisor: Child) -> float:
    """SIGTERM the supervisor; assert it exits 0 inside its bound; answers the seconds it took."""
    sent = time.monotonic()
    supervisor.signal(signal.SIGTERM)
    code = supervisor.wait(STOP_BOUND_S + 5)
    elapsed = time.monotonic() - sent
    assert code == 0, supervisor.describe()
    assert elapsed < STOP_BOUND_S, f"the supervisor exited {elapsed:.2f}s after SIGTERM: {supervisor.describe()}"
    return elapsed


@pytest.mark.slow
def test_two_processes_share_a_backlog_and_each_job_runs_once(fleet: Fleet) -> None:
    supervisor = fleet.start("--processes", "2", concurrency=4)
    pids = serving(supervisor, 2)

    enqueue_effects(fleet.pg, "backlog", 2_000)
    eventually(effects_done("backlog", 2_000), timeout=120.0, interval=0.2)

    ran_by = ran_once_each("backlog", 2_000)
    assert set(ran_by) == set(pids), f"not both children ran jobs: {ran_by}"
    assert query("SELECT state, attempts, count(*) FROM x_jobs GROUP BY state, attempts") == [("done", 1, 2_000)]
    stop(supervisor)
    assert not any(alive(pid) for pid in pids)
    assert "ERROR" not in supervisor.stderr, supervisor.describe()


@pytest.mark.slow
def test_a_sigkilled_child_is_replaced_and_the_backlog_still_drains(fleet: Fleet) -> None:
    supervisor = fleet.start("--processes", "2", concurrency=2, vt="2s")
    first = serving(supervisor, 2)
    held = fleet.pg.jobs.hold_retry.enqueue({"key": "held"}).id
    ((_, victim, _),) = eventually(lambda: markers(held), timeout=START_S, interval=POLL_S)
    enqueue_effects(fleet.pg, "kill", 300)

    os.kill(victim, signal.SIGKILL)  # no drain: what it held stays running under its lease until that lapses
    replacement = eventually(
        lambda: [pid for pid in children(supervisor) if pid not in first], timeout=START_S, interval=POLL_S
    )
    assert len(replacement) == 1, supervisor.describe()
    serving(supervisor, 2)
    assert "jobs.supervisor.child-exited" in supervisor.stderr and "SIGKILL" in supervisor.stderr

    eventually(effects_done("kill", 300), timeout=60.0, interval=0.2)
    runs = query("SELECT job_key, array_agg(worker_pid) FROM e2e_effects WHERE job_key LIKE 'kill-%%' GROUP BY job_key")
    assert len(runs) == 300  # nothing lost
    twice = {key: pids for key, pids in runs if len(pids) > 1}
    # at-least-once: a job runs again only when the killed child ran it and died before the settle landed
    assert all(len(pids) == 2 and victim in pids for pids in twice.values()), twice
    done = eventually(row_in(held, "done"), timeout=20.0, interval=POLL_S)
    assert done["attempts"] == 2  # the killed attempt counts; the next one ran after its lease lapsed
    (again,) = markers(held)[1:]
    assert again[0] == "again" and again[1] != victim, markers(held)
    stop(supervisor)


@pytest.mark.slow
def test_max_jobs_recycles_the_child_and_no_job_is_lost_or_run_twice(fleet: Fleet) -> None:
    supervisor = fleet.start("--processes", "1", "--max-jobs", "5", concurrency=2)
    seen: list[int] = []
    for round_ in range(3):
        (pid,) = serving(supervisor, 1)
        assert pid not in seen, f"round {round_}: the child {pid} was not replaced"
        seen.append(pid)
        enqueue_effects(fleet.pg, f"round{round_}", 5)
        eventually(effects_done(f"round{round_}", 5), timeout=START_S, interval=POLL_S)
        assert ran_once_each(f"round{round_}", 5) == {pid: 5}
        eventually(lambda pid=pid: not alive(pid), timeout=START_S, interval=POLL_S)  # it drains and exits

    # a backlog bigger than the limit: children recycle with jobs in flight; each job still runs once
    (pid,) = serving(supervisor, 1)
    enqueue_effects(fleet.pg, "burst", 40)
    eventually(effects_done("burst", 40), timeout=60.0, interval=POLL_S)
    assert set(ran_once_each("burst", 40)) <= set(children(supervisor)) - set(seen)
    assert query("SELECT state, count(*) FROM x_jobs GROUP BY state") == [("done", 55)]
    stop(supervisor)
    assert "ERROR" not in supervisor.stderr, supervisor.describe()


@pytest.mark.slow
def test_sigterm_drains_every_child_and_the_supervisor_exits_zero_inside_the_bound(fleet: Fleet) -> None:
    supervisor = fleet.start("--processes", "2", concurrency=1)
    pids = serving(supervisor, 2)
    held = [fleet.pg.jobs.hold_retry.enqueue({"key": f"drain-{i}"}).id for i in range(2)]
    eventually(lambda: any(map(markers, held)), timeout=START_S, interval=POLL_S)  # a body holds its slot

    stop(supervisor)
    assert not any(alive(pid) for pid in pids)
    for job_id in held:  # interrupted (or never started): back to ready at once, the attempt uncounted
        row, marks = job_row(job_id), markers(job_id)
        if row["state"] == "done":
            # handed back by one child while its sibling still took work (the two hear SIGTERM a moment
            # apart): the sibling claimed it at once and ran it — the drained attempt still uncounted
            assert (row["attempts"], row["last_code"]) == (1, "X_DRAINING"), row
            assert [kind for kind, _, _ in marks] == ["running", "again"] and marks[0][1] != marks[1][1], marks
            assert {pid for _, pid, _ in marks} <= set(pids), marks
            continue
        assert (row["state"], row["attempts"]) == ("ready", 0), row
        if marks:
            assert row["last_code"] == "X_DRAINING", row
    assert registered() == set()  # every child closed and left the registry
