"""Chaos: real ``manage.py jobs_worker`` and ``jobs_relay`` processes on a private Postgres cluster,
SIGKILLed at random under load while the cluster itself is crashed once (``pg_ctl restart -m
immediate``). Asserts outcomes, never timing:

- nothing is lost: every job reaches ``done`` (none dead, failed or left behind);
- nothing is stuck: no ``running`` row is seen more than twice the visibility timeout past its lease;
- no checkpoint without its effect: every stored step has its ledger row (the effect commits first);
- doubled effects are at-least-once only where it is allowed: the first run of a doubled step was on
  a worker this test SIGKILLed, or just before the Postgres crash (its checkpoint write then failed);
- none at all where the steps are transactional: half of the jobs (``chaos_atomic``) write their ledger
  rows with ``run.step.atomic``, in the transaction of the step's checkpoint;
- the outbox holds under a relay SIGKILLed again and again: one job per committed order, none for an
  order that rolled back, nothing left unpublished.

Chaos is paced by progress, not by the clock. Each time the count of done jobs passes its next mark
a worker holding running jobs is SIGKILLed (so the kill lands mid-job) and another started, and the
relay is SIGKILLed once it has published something (and another started); Postgres is crashed near
the middle. Orders are placed as the jobs progress, and the last share of them only after the last
relay kill, so every kill lands while there is outbox work. The size comes from ``CHAOS_SIZE``
(:mod:`tests.chaos.conftest`); ``CHAOS_SEED`` replays a run's choices. The figures are printed in
pytest's terminal summary.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.chaos.cluster import Cluster
from tests.chaos.conftest import DATABASE, FIGURES, Size, Start
from tests.helpers import Child, eventually

pytestmark = [pytest.mark.chaos, pytest.mark.e2e, pytest.mark.slow]

QUEUES = "chaos,chaos-orders"  # tests.chaos.workload's (not imported here: it declares jobs in this process)
VT_S = 5  # the workers' visibility timeout: a killed worker's jobs are re-claimed within it
RELAY_LEASE = "1s"  # a killed relay's claimed rows are taken over after it
RELAY_ARGS = ("--claim-lease", RELAY_LEASE, "--interval", "50ms", "--batch-size", "10")
POLL_S = 0.2
ENQUEUE_S = 300.0

SQL_PROGRESS = """
SELECT count(*) FILTER (WHERE name IN ('chaos_steps', 'chaos_atomic') AND state = 'done'),
       count(*) FILTER (WHERE state IN ('failed', 'dead', 'cancelled')),
       count(*) FILTER (WHERE name = 'chaos_order'),
       count(*) FILTER (WHERE name = 'chaos_order' AND state = 'done'),
       (SELECT count(*) FROM x_outbox WHERE published_at IS NULL),
       coalesce(array_agg(id::text) FILTER (
           WHERE state = 'running' AND lease_until < now() - %s * interval '1 second'), '{}')
FROM x_jobs
"""

# Every stored step must have the ledger row its function wrote before the checkpoint.
SQL_CHECKPOINTS_WITHOUT_EFFECT = """
SELECT count(*) FROM x_job_steps s
WHERE s.status = 'done'
  AND NOT EXISTS (SELECT 1 FROM chaos_effect e WHERE e.job_id = s.job_id AND e.step = s.name)
"""

# A step whose function ran more than once: its ledger rows in the order they were written, and its job's name.
SQL_DOUBLED = """
SELECT e.job_id::text, e.step, array_agg(e.worker_pid ORDER BY e.id), min(e.at), min(j.name)
FROM chaos_effect e JOIN x_jobs j ON j.id = e.job_id GROUP BY e.job_id, e.step HAVING count(*) > 1
"""

# Jobs per order row that committed, and jobs whose order never committed.
SQL_JOBS_PER_ORDER = """
SELECT o.number, count(j.id) FROM shop_order o
LEFT JOIN x_jobs j ON j.name = 'chaos_order' AND j.input->>'number' = o.number
WHERE o.org_id = 'chaos' GROUP BY o.number
"""
SQL_JOBS_WITHOUT_ORDER = """
SELECT count(*) FROM x_jobs j WHERE j.name = 'chaos_order'
  AND NOT EXISTS (SELECT 1 FROM shop_order o WHERE o.org_id = 'chaos' AND o.number = j.input->>'number')
"""
SQL_OUTBOX_WITHOUT_JOB = "SELECT count(*) FROM x_outbox b WHERE NOT EXISTS (SELECT 1 FROM x_jobs j WHERE j.id = b.id)"


class Reader:
    """This process's own connection to the private cluster (plain psycopg: the test's Django settings
    point at the shared server, which the chaos run never uses). Reconnects after the crash."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.conn: psycopg.Connection[Any] | None = None

    def query(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        if self.conn is None or self.conn.closed:
            self.conn = self.cluster.connect(DATABASE, connect_timeout=5)
        try:
            return self.conn.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            self.close()
            raise

    def one(self, sql: str, params: list[Any] | None = None) -> Any:
        return self.query(sql, params)[0][0]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def marks(total: int, count: int, rng: random.Random) -> list[int]:
    """``count`` increasing progress marks spread over 5 to 85 % of ``total``, each jittered within its slot."""
    slot = 0.8 * total / max(count, 1)
    return [int(0.05 * total + slot * (k + rng.uniform(0.2, 0.8))) for k in range(count)]


@dataclass
class Chaos:
    """One run: the children it started and killed, its marks, and what it saw."""

    size: Size
    cluster: Cluster
    start: Start
    db: Reader
    rng: random.Random
    workers: list[Child] = field(default_factory=list)
    relay: Child | None = None
    orders: Child | None = None
    killed_pids: set[int] = field(default_factory=set)
    relay_kills: int = 0
    relay_started_at: int = 0  # how many orders were published when the current relay started
    orders_asked: int = 0
    crash: tuple[datetime, datetime] | None = None
    crash_ended: float = 0.0  # time.monotonic() when the server was back
    born: dict[int, float] = field(default_factory=dict)  # pid -> time.monotonic() at its start
    by_pid: dict[int, Child] = field(default_factory=dict)  # every child started, alive or not
    restarted: int = 0  # children that could not start while the server was down, started again
    stuck: set[str] = field(default_factory=set)
    started: int = 0
    kill_at: list[int] = field(default_factory=list)
    relay_kill_at: list[int] = field(default_factory=list)
    crash_at: int = 0

    def __post_init__(self) -> None:
        self.kill_at = marks(self.size.jobs, self.size.kills, self.rng)
        self.relay_kill_at = marks(self.size.jobs, self.size.relay_kills, self.rng)
        self.crash_at = int(self.size.jobs * self.rng.uniform(0.4, 0.6))

    # -- children ------------------------------------------------------------------------------

    def spawn(self, name: str, *args: str) -> Child:
        child = self.start(name, *args, vt=f"{VT_S}s")
        self.born[child.pid] = time.monotonic()
        self.by_pid[child.pid] = child
        return child

    def start_worker(self) -> None:
        self.started += 1
        args = ("manage.py", "jobs_worker", "--queues", QUEUES, "--concurrency", str(self.size.concurrency))
        self.workers.append(self.spawn(f"worker-{self.started}", *args))

    def start_relay(self) -> None:
        self.started += 1
        self.relay = self.spawn(f"relay-{self.started}", "manage.py", "jobs_relay", *RELAY_ARGS)

    def start_orders(self) -> None:
        self.orders = self.start("orders", "-m", "tests.chaos.produce", "orders", str(self.size.orders), vt=f"{VT_S}s")

    @staticmethod
    def banner(child: Child, head: str) -> str | None:
        """The id a child printed in its first line (``worker <id> …`` / ``relay <id> …``), once it has."""
        lines = child.lines
        return lines[0].split()[1] if lines and lines[0].startswith(head) else None

    def check_children(self) -> None:
        """A child that exits unasked fails the run at once (RuntimeError is not eventually()'s "not yet"),
        unless it was starting while the server was down: its start-up check could not connect, and it
        is started again, as a process manager would."""
        for child in [*self.workers, *([self.relay] if self.relay else [])]:
            if child.popen.poll() is None:
                continue
            if not child.lines and self.crash is not None and self.born[child.pid] <= self.crash_ended:
                self.restarted += 1
                if child is self.relay:
                    self.start_relay()
                else:
                    self.workers.remove(child)
                    self.start_worker()
                continue
            raise RuntimeError(f"a child exited unasked: {child.describe()}")
        if self.orders is not None and self.orders.popen.poll() not in (None, 0):
            raise RuntimeError(f"the order producer failed: {self.orders.describe()}")

    def orders_outcome(self) -> dict[str, list[str]] | None:
        if self.orders is None or self.orders.popen.poll() is None:
            return None
        return dict(json.loads(self.orders.line(0)))

    # -- chaos ---------------------------------------------------------------------------------

    def kill_worker(self) -> None:
        holding = {w for (w,) in self.db.query("SELECT DISTINCT worker_id FROM x_jobs WHERE state = 'running'")}
        victims = [w for w in self.workers if self.banner(w, "worker ") in holding]
        if not victims:
            return  # every worker is starting or idle: try again at the next poll
        victim = self.rng.choice(victims)
        victim.signal(signal.SIGKILL)
        assert victim.wait() == -signal.SIGKILL, victim.describe()
        self.workers.remove(victim)
        self.killed_pids.add(victim.pid)
        self.start_worker()

    def kill_relay(self, published: int) -> None:
        """SIGKILL the relay once it has published something of its own, and start the next one."""
        assert self.relay is not None
        if published <= self.relay_started_at:
            return
        self.relay.signal(signal.SIGKILL)
        assert self.relay.wait() == -signal.SIGKILL, self.relay.describe()
        self.relay_kills += 1
        self.relay_started_at = published
        self.start_relay()

    def ask_for_orders(self, done: int) -> None:
        """Tell the producer how many orders should be placed by now: the jobs' share done, of all orders,
        and no more than the relay kills so far allow (k kills of K: (k + 1) / (K + 1) of them)."""
        assert self.orders is not None
        allowed = self.size.orders * (self.relay_kills + 1) // (self.size.relay_kills + 1)
        target = min(self.size.orders * done // self.size.jobs, allowed)
        if target > self.orders_asked and self.orders.popen.poll() is None:
            self.orders.send(str(target))
            self.orders_asked = target

    def crash_postgres(self) -> None:
        self.db.close()
        began = datetime.now(UTC)
        self.cluster.crash()
        self.crash = (began, datetime.now(UTC))
        self.crash_ended = time.monotonic()

    def step(self) -> bool:
        """One poll: read the progress, make the chaos that is due, answer whether the run is over."""
        self.check_children()
        try:
            return self._step()
        except psycopg.OperationalError:
            return False  # the server is coming back from the crash: ask again

    def _step(self) -> bool:
        done, broken, order_jobs, order_jobs_done, backlog, stuck = self.db.query(SQL_PROGRESS, [2 * VT_S])[0]
        if broken:
            rows = self.db.query("SELECT name, state, last_code, last_error FROM x_jobs WHERE state <> 'done' LIMIT 5")
            raise RuntimeError(f"{broken} jobs ended without completing: {rows}")
        self.stuck.update(stuck)
        if len(self.killed_pids) < self.size.kills and done >= self.kill_at[len(self.killed_pids)]:
            self.kill_worker()
        if self.crash is None and done >= self.crash_at:
            self.crash_postgres()
            return False
        if self.relay_kills < self.size.relay_kills and done >= self.relay_kill_at[self.relay_kills]:
            self.kill_relay(order_jobs)
        self.ask_for_orders(done)
        placed = self.orders_outcome() is not None
        if done == self.size.jobs and len(self.killed_pids) < self.size.kills:
            raise RuntimeError(f"the jobs finished after {len(self.killed_pids)} of {self.size.kills} worker kills")
        return (
            done == self.size.jobs and self.crash is not None and placed and backlog == 0
            and order_jobs_done == order_jobs
        )  # fmt: skip

    def explained(self, first_pid: int, first_at: datetime) -> str | None:
        """Why a step's function ran twice: its first run was on a killed worker, or its effect committed
        just before the crash and the checkpoint write after it failed. ``None``: unexplained."""
        if first_pid in self.killed_pids:
            return "killed"
        if self.crash is not None and self.crash[0] - timedelta(seconds=VT_S) <= first_at <= self.crash[1]:
            return "crash"
        return None


@dataclass(frozen=True)
class Verdict:
    """What the database holds after a run, and the run's own counts: the figures and what is asserted."""

    elapsed_s: float
    states: dict[str, int]
    lost: int  # three-step jobs (chaos_steps, chaos_atomic) not done
    stuck: int  # jobs seen running past twice the visibility timeout
    unsettled: int  # checkpoints without their ledger row
    doubled: list[tuple[str, str, list[int], str | None]]  # step.run jobs: (job, step, pids in order, why)
    doubled_atomic: list[tuple[str, str, list[int], str | None]]  # step.atomic jobs: the same (none allowed)
    per_order: dict[str, int]  # committed order number -> its jobs
    jobs_without_order: int
    outbox_without_job: int
    backlog: int
    placed: dict[str, list[str]]  # the producer's report: committed / rolled_back / failed numbers

    @classmethod
    def read(cls, run: Chaos, elapsed_s: float) -> Verdict:
        db = run.db
        done = db.one("SELECT count(*) FROM x_jobs WHERE name IN ('chaos_steps', 'chaos_atomic') AND state = 'done'")
        doubled = [
            (job, step, pids, run.explained(pids[0], at), name) for job, step, pids, at, name in db.query(SQL_DOUBLED)
        ]
        return cls(
            elapsed_s=elapsed_s,
            states=dict(db.query("SELECT state, count(*) FROM x_jobs GROUP BY state")),
            lost=run.size.jobs - int(done),
            stuck=len(run.stuck),
            unsettled=db.one(SQL_CHECKPOINTS_WITHOUT_EFFECT),
            doubled=[d[:4] for d in doubled if d[4] != "chaos_atomic"],
            doubled_atomic=[d[:4] for d in doubled if d[4] == "chaos_atomic"],
            per_order=dict(db.query(SQL_JOBS_PER_ORDER)),
            jobs_without_order=db.one(SQL_JOBS_WITHOUT_ORDER),
            outbox_without_job=db.one(SQL_OUTBOX_WITHOUT_JOB),
            backlog=db.one("SELECT count(*) FROM x_outbox WHERE published_at IS NULL"),
            placed=run.orders_outcome() or {"committed": [], "rolled_back": [], "failed": []},
        )

    def table(self, run: Chaos, seed: int) -> str:
        size = run.size
        why = [d[3] for d in self.doubled]
        placed = sum(len(numbers) for numbers in self.placed.values())
        rows = [
            ("jobs (three steps each): step.run / step.atomic", f"{size.jobs - size.jobs // 2} / {size.jobs // 2}"),
            ("worker processes x slots", f"{size.workers} x {size.concurrency}"),
            ("worker SIGKILLs", f"{len(run.killed_pids)}"),
            ("Postgres crashes (restart -m immediate)", f"{int(run.crash is not None)}"),
            ("lost (not done)", f"{self.lost}"),
            (f"stuck (running > {2 * VT_S} s past its lease)", f"{self.stuck}"),
            ("checkpoints without their effect", f"{self.unsettled}"),
            (
                "doubled effects, step.run jobs",
                f"{len(why)} (first run on a killed worker {why.count('killed')}, "
                f"just before the crash {why.count('crash')}, unexplained {why.count(None)})",
            ),
            ("doubled effects, step.atomic jobs", f"{len(self.doubled_atomic)}"),
            (
                "orders committed / rolled back",
                f"{len(self.per_order)} / {placed - len(self.per_order)} "
                f"({len(self.placed['failed'])} cut by the crash)",
            ),
            ("relay SIGKILLs", f"{run.relay_kills}"),
            ("jobs per committed order", "/".join(str(n) for n in sorted(set(self.per_order.values()))) or "-"),
            ("jobs for orders that did not commit", f"{self.jobs_without_order}"),
            ("processes started again (server down at start-up)", f"{run.restarted}"),
        ]
        width = max(len(k) for k, _ in rows)
        head = f"chaos run: {size.name} form, seed {seed}, {self.elapsed_s:.1f} s"
        return "\n".join([head, *(f"  {k:<{width}}  {v}" for k, v in rows)])


@pytest.fixture
def db(cluster: Cluster) -> Iterator[Reader]:
    with closing(Reader(cluster)) as reader:
        yield reader


def test_jobs_and_the_outbox_survive_sigkills_and_a_postgres_crash(
    cluster: Cluster, start: Start, db: Reader, size: Size
) -> None:
    seed = int(os.environ.get("CHAOS_SEED", time.time_ns() % 1_000_000))
    run = Chaos(size, cluster, start, db, random.Random(seed))
    began = time.monotonic()
    enqueue = start("enqueue", "-m", "tests.chaos.produce", "jobs", str(size.jobs), vt=f"{VT_S}s")
    assert enqueue.line(0, timeout=ENQUEUE_S) == f"ENQUEUED {size.jobs}", enqueue.describe()
    for _ in range(size.workers):
        run.start_worker()
    run.start_relay()
    run.start_orders()
    failure: AssertionError | RuntimeError | None = None
    try:
        eventually(run.step, timeout=size.deadline_s, interval=POLL_S)
    except (AssertionError, RuntimeError) as exc:
        failure = exc
    finally:
        for child in [*run.workers, *([run.relay] if run.relay else [])]:
            child.close()
    verdict = Verdict.read(run, time.monotonic() - began)
    table = verdict.table(run, seed)
    FIGURES.append(table)
    if failure is not None:
        raise AssertionError(f"{failure}\n{table}\nstates {verdict.states}") from failure

    assert (verdict.lost, verdict.stuck, verdict.unsettled) == (0, 0, 0), table
    assert verdict.states == {"done": size.jobs + len(verdict.per_order)}, verdict.states
    unexplained = [d for d in verdict.doubled if d[3] is None]
    assert not unexplained, (
        f"doubled effects whose first run was on a worker that was not killed: {unexplained[:5]}\n{table}\n"
        + "\n".join(run.by_pid[pid].describe() for pid in {d[2][0] for d in unexplained} if pid in run.by_pid)
    )
    assert verdict.doubled_atomic == [], (
        f"transactional steps whose effect doubled: {verdict.doubled_atomic[:5]}\n{table}"
    )
    assert set(verdict.per_order.values()) == {1}, f"jobs per committed order: {verdict.per_order}"
    assert (verdict.jobs_without_order, verdict.outbox_without_job, verdict.backlog) == (0, 0, 0), table
    committed, rolled_back = set(verdict.placed["committed"]), set(verdict.placed["rolled_back"])
    assert committed <= set(verdict.per_order), "an order whose commit returned is not in the table"
    assert not rolled_back & set(verdict.per_order), "an order that rolled back is in the table"
    assert len(committed) + len(rolled_back) + len(verdict.placed["failed"]) == size.orders
    assert (len(run.killed_pids), run.relay_kills, run.crash is not None) == (size.kills, size.relay_kills, True)
