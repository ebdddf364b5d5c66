"""The outbox across real processes on the test database: this process stages in ``atomic()`` blocks;
relays (``manage.py jobs_relay``, or :mod:`tests.e2e.outbox_relay` when a test needs a start barrier or
a relay that stalls mid-pass to be SIGKILLed) publish; ``manage.py jobs_worker`` runs the jobs of
:mod:`tests.e2e.pg_jobs`, which write ``e2e_effects`` rows — so the test reads what ran, and how often.

Children run under :mod:`tests.e2e.pg_settings` (the Postgres driver) with ``ULTIMATE_JOBS_TEST_DB``
naming the test database itself. Every wait is a bounded ``eventually()``; every child still alive at
teardown is SIGKILLed before the tables are flushed.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest
from django.db import connection, transaction

from tests.e2e.test_postgres_processes import REPO, effects_table, query  # noqa: F401
from tests.helpers import POLL_S, START_S, Child, eventually
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.outbox import OutboxRouter, postgres_outbox_store

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("effects_table"),
]

QUEUE = "e2e-pg"
LEASE = "2s"
BULK_ROWS = 1_000
BULK_TX = 100  # rows staged per transaction


Start = Callable[..., Child]


@pytest.fixture
def children() -> Iterator[Start]:
    """Start children on the test database with the Postgres settings; SIGKILL whatever still runs."""
    started: list[Child] = []
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "tests.e2e.pg_settings",
        "ULTIMATE_JOBS_TEST_DB": connection.settings_dict["NAME"],
    }

    def start(name: str, *args: str) -> Child:
        child = Child(name, [sys.executable, *args], env)
        started.append(child)
        return child

    try:
        yield start
    finally:
        for child in started:
            child.close()


@dataclass
class Staging:
    """This process's outbox: the router installed over the test database, and the e2e job handles."""

    router: OutboxRouter
    jobs: ModuleType

    def commit(self, *keys: str) -> list[str]:
        """Stage one ``record_effect`` per key in ONE transaction, committed; answers the job ids."""
        with transaction.atomic():
            return [self.jobs.record_effect.enqueue({"key": k}).id for k in keys]


@pytest.fixture
def staging() -> Iterator[Staging]:
    from tests.e2e import pg_jobs

    driver = PostgresDriver()
    set_job_driver(driver)
    router = OutboxRouter(store=postgres_outbox_store(), driver=driver, mode="required")
    set_jobs_router(router)
    try:
        yield Staging(router, pg_jobs)
    finally:
        set_jobs_router(None)
        set_job_driver(None)
        for name in ("record_effect", "hold_retry", "hold_once"):
            registry.unregister(name)  # declared for the children; this process only stages


def start_worker(start: Start) -> Child:
    worker = start("worker", "manage.py", "jobs_worker", "--queues", QUEUE, "--concurrency", "4")
    assert worker.line(0).startswith("worker "), worker.describe()
    return worker


def start_relay_command(start: Start, name: str) -> tuple[Child, str]:
    """``manage.py jobs_relay`` with a short claim lease; answers it and its relay id."""
    relay = start(name, "manage.py", "jobs_relay", "--claim-lease", LEASE, "--interval", "50ms")
    banner = relay.line(0)
    assert banner.startswith("relay ") and banner.endswith(" publishing postgres outbox to postgres"), banner
    return relay, banner.split()[1]


def start_relays(start: Start, *names: str, stall: str | None = None, batch_size: int = 100) -> list[Child]:
    """:mod:`tests.e2e.outbox_relay` per name, all READY before any is told GO; ``child.worker_id`` holds
    the relay id."""
    args = ["-m", "tests.e2e.outbox_relay", "--claim-lease", LEASE, "--batch-size", str(batch_size)]
    relays = [start(name, *args, *(["--stall", stall] if stall else [])) for name in names]
    for relay in relays:
        ready = relay.line(0)
        assert ready.startswith("READY relay-"), relay.describe()
        relay.worker_id = ready.split()[1]
    for relay in relays:
        relay.send("GO")
    return relays


def effects(key: str) -> list[tuple[Any, ...]]:
    return query("SELECT worker_pid, attempt FROM e2e_effects WHERE job_key = %s", [key])


def outbox_row(job_id: str) -> dict[str, Any]:
    rows = query(
        "SELECT claimed_by, claimed_at, published_at FROM x_outbox WHERE id = %s",
        [job_id],
    )
    assert len(rows) == 1, f"x_outbox has {len(rows)} rows for {job_id}"
    return dict(zip(("claimed_by", "claimed_at", "published_at"), rows[0], strict=True))


def backlog() -> int:
    return int(query("SELECT count(*) FROM x_outbox WHERE published_at IS NULL")[0][0])


@pytest.mark.slow
def test_a_rolled_back_enqueue_never_runs_and_a_committed_one_runs_once(children: Start, staging: Staging) -> None:
    with pytest.raises(RuntimeError, match="declined"), transaction.atomic():
        lost = staging.jobs.record_effect.enqueue({"key": "rolled-back"}).id
        raise RuntimeError("the card was declined")
    (kept,) = staging.commit("committed")
    worker = start_worker(children)
    relay, _ = start_relay_command(children, "relay")

    eventually(lambda: effects("committed"), timeout=START_S, interval=POLL_S)
    eventually(lambda: backlog() == 0, timeout=START_S, interval=POLL_S)
    assert len(effects("committed")) == 1
    assert effects("rolled-back") == []
    assert query("SELECT id::text FROM x_outbox") == [(kept,)]  # the rolled-back row never existed
    # the body's effect commits before its settle lands (the worker acks in batches): wait for the settle
    eventually(lambda: query("SELECT state FROM x_jobs WHERE id = %s", [kept]) == [("done",)], timeout=START_S)
    assert query("SELECT id::text, idempotency_key, state FROM x_jobs") == [(kept, "committed", "done")]
    assert lost != kept
    for child in (relay, worker):
        assert "ERROR" not in child.stderr, child.describe()


@pytest.mark.slow
def test_a_relay_sigkilled_before_publishing_is_replaced_and_the_job_runs_once(
    children: Start, staging: Staging
) -> None:
    (job_id,) = staging.commit("killed-before-publish")
    (a,) = start_relays(children, "A", stall="before")
    assert a.line(1) == "CLAIMED 1", a.describe()
    held = outbox_row(job_id)
    assert held["claimed_by"].startswith(f"{a.worker_id}:") and held["published_at"] is None
    assert query("SELECT count(*) FROM x_jobs") == [(0,)]

    a.signal(signal.SIGKILL)  # no release, no mark: the row stays claimed under A's lease
    assert a.wait() == -signal.SIGKILL
    start_worker(children)
    b, b_id = start_relay_command(children, "B")

    eventually(lambda: effects("killed-before-publish"), timeout=START_S, interval=POLL_S)
    published = eventually(lambda: outbox_row(job_id)["published_at"], timeout=START_S, interval=POLL_S)
    row = outbox_row(job_id)
    assert row["claimed_by"].startswith(f"{b_id}:"), row
    assert row["claimed_at"] >= held["claimed_at"] + timedelta(seconds=2)  # B waited out A's lease
    assert published >= row["claimed_at"]
    assert len(effects("killed-before-publish")) == 1
    eventually(lambda: query("SELECT state FROM x_jobs WHERE id = %s", [job_id]) == [("done",)], timeout=START_S)
    assert query("SELECT id::text, state, attempts FROM x_jobs") == [(job_id, "done", 1)]
    assert "ERROR" not in b.stderr, b.describe()


@pytest.mark.slow
def test_a_relay_sigkilled_between_publish_and_mark_republishes_into_the_finished_job(
    children: Start, staging: Staging
) -> None:
    (job_id,) = staging.commit("killed-after-publish")
    (a,) = start_relays(children, "A", stall="after")
    assert a.line(1) == "PUBLISHED 1", a.describe()
    assert outbox_row(job_id)["published_at"] is None  # published, never marked
    a.signal(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL

    start_worker(children)  # the job A published runs and finishes first
    eventually(lambda: query("SELECT state FROM x_jobs WHERE id = %s", [job_id]) == [("done",)], timeout=START_S)
    b, b_id = start_relay_command(children, "B")  # then B publishes the row again, after A's lease
    eventually(lambda: outbox_row(job_id)["published_at"], timeout=START_S, interval=POLL_S)
    assert outbox_row(job_id)["claimed_by"].startswith(f"{b_id}:")
    assert query("SELECT id::text, state, attempts FROM x_jobs") == [(job_id, "done", 1)]  # nothing inserted
    assert len(effects("killed-after-publish")) == 1  # and nothing ran again
    assert "ERROR" not in b.stderr, b.describe()


@pytest.mark.slow
def test_two_relays_over_a_thousand_staged_rows_publish_every_job_exactly_once(
    children: Start, staging: Staging
) -> None:
    staged: list[str] = []
    for start in range(0, BULK_ROWS, BULK_TX):
        with transaction.atomic():
            requests = [
                staging.jobs.record_effect.build_request({"key": f"bulk-{i:04d}"})
                for i in range(start, start + BULK_TX)
            ]
            staged += [a.id for a in staging.router.enqueue_many(requests)]
    relays = start_relays(children, "R1", "R2", batch_size=10)

    try:
        eventually(lambda: backlog() == 0, timeout=60.0, interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"backlog {backlog()}; {[r.describe() for r in relays]}") from exc

    jobs = query("SELECT id::text, count(*) OVER () FROM x_jobs")
    assert sorted(j[0] for j in jobs) == sorted(staged) and jobs[0][1] == BULK_ROWS  # every job exactly once
    claimants = {row[0].split(":")[0] for row in query("SELECT claimed_by FROM x_outbox")}
    assert claimants == {r.worker_id for r in relays}, f"one relay published every row: {claimants}"
    for relay in relays:
        relay.signal(signal.SIGTERM)
    for relay in relays:
        assert relay.wait() == 0, relay.describe()
        assert "ERROR" not in relay.stderr, relay.describe()
