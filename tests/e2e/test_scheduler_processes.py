"""Real scheduler and worker processes against Postgres (settings :mod:`tests.e2e.sched_settings`, task
and jobs :mod:`tests.e2e.sched_jobs`): two ``manage.py jobs_scheduler`` processes fire every
occurrence exactly once, a SIGKILLed leader's standby takes over after the lease TTL and fires what it
missed, a SIGTERMed leader hands its lease back, and a job waiting on ``step.wait_for_event`` in a
worker process resumes when THIS process publishes the event.

What fired is read from ``x_jobs``: every occurrence enqueues one row keyed by its instant, stamped
with the firing process's clock (``created_at``). Every wait is a bounded ``eventually()``; every child
still alive at teardown is SIGKILLed before the database is flushed.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.helpers import EXIT_S, POLL_S, START_S, Child, eventually
from ultimate_jobs import postgres_event_bus
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.executor import django_executor, from_jsonb

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
LEASE_TTL_S = 3.0
TICK = "100ms"


class Scheduler(Child):
    holder = ""


@pytest.fixture
def spawn() -> Iterator[Any]:
    children: list[Child] = []
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "tests.e2e.sched_settings",
        "ULTIMATE_JOBS_TEST_DB": connection.settings_dict["NAME"],
        "UJ_LOG_LEVEL": "INFO",
    }

    def start(kind: type[Child], name: str, *args: str) -> Child:
        child = kind(name, [sys.executable, "manage.py", *args], env)
        children.append(child)
        return child

    try:
        yield start
    finally:
        for child in children:
            child.close()


def start_schedulers(spawn: Any, *names: str) -> list[Scheduler]:
    args = ("jobs_scheduler", "--lease-ttl", f"{LEASE_TTL_S:g}s", "--tick-interval", TICK, "--drain-deadline", "5s")
    schedulers = [spawn(Scheduler, name, *args) for name in names]
    for sched in schedulers:
        banner = sched.line(0)
        assert banner.startswith("scheduler ") and "every_second" in banner, sched.describe()
        sched.holder = banner.split()[1]
    return schedulers


def query(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description is not None else []


def lease() -> tuple[str, datetime, datetime] | None:
    rows = query("SELECT holder, acquired_at, expires_at FROM x_job_scheduler_leases WHERE name = 'scheduler'")
    return rows[0] if rows else None  # type: ignore[return-value]


def ticks() -> list[tuple[int, int, datetime]]:
    """(occurrence ms, rows for it, first created_at) per occurrence of ``every_second``."""
    return query(  # type: ignore[return-value]
        "SELECT (input->>'occurrence_ms')::bigint, count(*), min(created_at) FROM x_jobs "
        "WHERE name = 'record_tick' AND input->>'task' = 'every_second' GROUP BY 1 ORDER BY 1"
    )


def assert_every_second_once(rows: list[tuple[int, int, datetime]]) -> None:
    occurrences = [occurrence for occurrence, _, _ in rows]
    assert all(count == 1 for _, count, _ in rows), [r for r in rows if r[1] != 1]
    assert occurrences == list(range(occurrences[0], occurrences[-1] + 1000, 1000)), "an occurrence is missing"


@pytest.mark.slow
def test_a_sigkilled_leaders_standby_takes_over_after_the_ttl_and_fires_what_it_missed_once(spawn: Any) -> None:
    a, b = start_schedulers(spawn, "A", "B")
    holder = eventually(lambda: (lease() or ("",))[0], timeout=START_S, interval=POLL_S)
    leader, standby = (a, b) if holder == a.holder else (b, a)
    assert holder == leader.holder, (holder, a.holder, b.holder)
    eventually(lambda: len(ticks()) >= 5, timeout=20.0, interval=POLL_S)

    leader.signal(signal.SIGKILL)  # no drain, no release: the lease row stays until it expires
    assert leader.wait() == -signal.SIGKILL
    dead = lease()
    assert dead is not None and dead[0] == leader.holder
    last_by_leader = ticks()[-1][0]

    def taken_over() -> tuple[str, datetime, datetime] | None:
        row = lease()
        return row if row is not None and row[0] == standby.holder else None

    took = eventually(taken_over, timeout=LEASE_TTL_S + 15.0, interval=POLL_S)
    assert took[1] >= dead[2], "the standby took the lease before the dead leader's had expired"
    eventually(lambda: ticks()[-1][0] >= last_by_leader + 5_000, timeout=20.0, interval=POLL_S)

    rows = ticks()
    assert_every_second_once(rows)
    # Occurrences due before the dead leader's lease expired, fired after it expired: only the standby
    # can have fired those. (Not measured from the standby's acquired_at: a standby that stalls under
    # load and re-takes its own lease starts a new term with a later acquired_at.)
    expired_ms = dead[2].timestamp() * 1000
    missed = [r for r in rows if last_by_leader < r[0] < expired_ms and r[2] >= dead[2]]
    assert missed, "the standby fired none of the occurrences the dead leader missed"
    assert "jobs.scheduler.leading" in standby.stderr, standby.describe()

    standby.signal(signal.SIGTERM)
    assert standby.wait(EXIT_S) == 0, standby.describe()
    assert lease() is None  # a drained leader hands its lease back
    assert_every_second_once(ticks())
    for child in (a, b):
        assert "ERROR" not in child.stderr, child.describe()


@pytest.mark.slow
def test_two_schedulers_fire_every_occurrence_exactly_once_and_a_drained_leader_hands_over_at_once(
    spawn: Any,
) -> None:
    a, b = start_schedulers(spawn, "A", "B")
    holder = eventually(lambda: (lease() or ("",))[0], timeout=START_S, interval=POLL_S)
    leader, standby = (a, b) if holder == a.holder else (b, a)
    eventually(lambda: len(ticks()) >= 8, timeout=20.0, interval=POLL_S)
    leader.signal(signal.SIGTERM)
    assert leader.wait(EXIT_S) == 0, leader.describe()
    # Released, not expired: the standby takes it at its next ask (every third of the TTL).
    eventually(lambda: (lease() or ("",))[0] == standby.holder, timeout=LEASE_TTL_S, interval=POLL_S)
    handed_over_at = ticks()[-1][0]
    eventually(lambda: ticks()[-1][0] >= handed_over_at + 3_000, timeout=20.0, interval=POLL_S)
    assert_every_second_once(ticks())


@pytest.fixture
def pg_driver() -> Iterator[PostgresDriver]:
    from tests.e2e import sched_jobs  # noqa: F401 — declares the jobs this process enqueues

    driver = PostgresDriver()
    set_job_driver(driver)
    try:
        yield driver
    finally:
        set_job_driver(None)
        for name in ("record_tick", "every_second", "await_answer"):
            registry.unregister(name)


def test_a_wait_in_a_worker_process_resumes_when_another_process_publishes(spawn: Any, pg_driver: Any) -> None:
    from tests.e2e.sched_jobs import EVENT_QUEUE, await_answer

    worker = spawn(Child, "W", "jobs_worker", "--queues", EVENT_QUEUE, "--concurrency", "2")
    assert worker.line(0).startswith("worker "), worker.describe()
    job_id = await_answer.enqueue({"key": "k-1"}).id

    def state() -> str:
        return str(query("SELECT state FROM x_jobs WHERE id = %s", [job_id])[0][0])

    eventually(lambda: state() == "suspended", timeout=START_S, interval=POLL_S)
    bus = postgres_event_bus(django_executor("default"))
    bus.publish("e2e.answer", {"key": "k-2"})  # another key: the wait keeps waiting
    bus.publish("e2e.answer", {"key": "k-1", "paid": True})
    eventually(lambda: state() == "done", timeout=15.0, interval=POLL_S)
    output = query("SELECT output FROM x_job_steps WHERE job_id = %s AND name = 'answer'", [job_id])[0][0]
    assert from_jsonb(output) == {"key": "k-1", "paid": True}
    assert "ERROR" not in worker.stderr, worker.describe()
