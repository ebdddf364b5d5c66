"""Fair queues on Postgres, past what the conformance suite can see: the claim's cost does not grow with
the orgs waiting (10,000 of them) nor, for a quiet org's row, with a busy org's backlog — in the plan the
worker runs — and an enqueue not yet committed keeps its org's lane in the rotation.

The cost is read off ``EXPLAIN ANALYZE`` of the claim itself — the rows each scan of ``x_job_turns`` and
``x_jobs`` returned, over all its loops — never a wall-clock time."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections, transaction

from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.executor import django_executor
from ultimate_jobs.testing import FrozenClock
from ultimate_jobs.testing.conformance_support import request

pytestmark = [pytest.mark.postgres]

FAIR = "fair"
CAP = 10


class Recording:
    """The driver's executor, remembering the last statement and parameters it ran."""

    def __init__(self) -> None:
        self.inner = django_executor("default")
        self.alias = self.inner.alias
        self.last: tuple[str, Any] = ("", None)

    def query(self, sql: str, params: Any = None, *, binding: str = "django") -> list[tuple[Any, ...]]:
        self.last = (sql, params)
        return self.inner.query(sql, params, binding=binding)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def driver(db: None) -> Iterator[PostgresDriver]:
    built = PostgresDriver(clock=FrozenClock(), executor=Recording(), fair_queues=[FAIR])
    yield built
    built.close()


def orgs(driver: PostgresDriver, count: int, *, per_org: int = 1, prefix: str = "org") -> None:
    for start in range(0, count, 1_000):
        driver.enqueue_many(
            [request(queue=FAIR, tenant_id=f"{prefix}-{n}") for n in range(start, min(count, start + 1_000))
             for _ in range(per_org)]
        )  # fmt: skip


def rows_read(statement: str, params: Any) -> dict[str, int]:
    """Run ``statement`` under EXPLAIN ANALYZE (rolled back) and answer, per table, the rows its scans of
    that table returned over all their loops."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        [[plan]] = cursor.fetchall()
        transaction.set_rollback(True)
    found: dict[str, int] = {}

    def walk(node: dict[str, Any]) -> None:
        table = node.get("Relation Name")
        if table in ("x_jobs", "x_job_turns") and "Scan" in node["Node Type"]:
            found[table] = found.get(table, 0) + int(node["Actual Rows"]) * int(node["Actual Loops"])
        for child in node.get("Plans", []):
            walk(child)

    walk((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    return found


def claim_cost(driver: PostgresDriver) -> dict[str, int]:
    """What the next fair claim of CAP reads, measured on a claim just like it (the driver's last one)."""
    assert driver.claim(queues=[FAIR], limit=CAP, worker_id="w1").jobs
    driver.clock.advance(1)  # type: ignore[attr-defined]
    statement, params = driver.executor.last
    return rows_read(statement, {**params, "now": driver.clock.now_ms()})


def test_a_fair_claims_reads_do_not_grow_with_ten_thousand_orgs_waiting(driver: PostgresDriver) -> None:
    orgs(driver, 20, per_org=5, prefix="few")
    for _ in range(3):  # past the first wake: lanes in the rotation and lanes still waking
        claim_cost(driver)
    few = claim_cost(driver)
    orgs(driver, 10_000)
    for _ in range(3):
        claim_cost(driver)
    many = claim_cost(driver)
    assert many["x_jobs"] == few["x_jobs"]  # its lanes' rows, the fill's and its own update: 3 x CAP at most
    # 2 x CAP lanes looked at (the rotation's oldest, and the ones waking) and the ones it moves along, with
    # 10,020 orgs waiting as with 20 (where none is waking any more)
    assert few["x_job_turns"] <= many["x_job_turns"] <= 4 * CAP


def rows_scanned_by_the_workers_plan(driver: PostgresDriver) -> tuple[list[str], int]:
    """Claim CAP through the driver under the plan a worker's session runs (one generic plan: the worker's
    session forces it, a test's transaction does not) and answer the claimed rows' orgs and the x_jobs rows
    its scans read — returned or removed by a filter — off auto_explain's ``EXPLAIN ANALYZE`` of it."""
    notices: list[str] = []
    connection.ensure_connection()
    raw = connection.connection

    def heard(diag: Any) -> None:
        notices.append(diag.message_primary or "")

    raw.add_notice_handler(heard)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cursor.execute("LOAD 'auto_explain'")
            for setting in ("log_min_duration = 0", "log_analyze = on", "log_format = json"):
                cursor.execute(f"SET LOCAL auto_explain.{setting}")
            cursor.execute("SET LOCAL client_min_messages = log")
        taken = driver.claim(queues=[FAIR], limit=CAP, worker_id="w1").jobs
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL client_min_messages = notice")
    finally:
        raw.remove_notice_handler(heard)
    [plan] = [json.loads(n.split("plan:", 1)[1])["Plan"] for n in notices if "x_job_turns" in n]
    read = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal read
        if node.get("Relation Name") == "x_jobs" and "Scan" in node["Node Type"]:
            read += (int(node["Actual Rows"]) + int(node.get("Rows Removed by Filter", 0))) * int(node["Actual Loops"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    return [j.tenant_id or "" for j in taken], read


def test_a_quiet_orgs_row_is_found_without_reading_a_busy_orgs_backlog(driver: PostgresDriver) -> None:
    # one org holds every row when the statistics are taken: the generic plan once walked the queue's own
    # index for every lane and read org A's whole backlog to find org B's row
    driver.enqueue_many([request(queue=FAIR, tenant_id="busy") for _ in range(2_000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE x_jobs")
    driver.claim(queues=[FAIR], limit=CAP, worker_id="w1")
    driver.enqueue_many([request(queue=FAIR, tenant_id="quiet")])
    driver.clock.advance(1)  # type: ignore[attr-defined]
    orgs_taken, read = rows_scanned_by_the_workers_plan(driver)
    assert "quiet" in orgs_taken
    assert read <= 3 * CAP  # the lanes' rows and the claim's own update, never the busy org's backlog


def test_an_uncommitted_enqueue_keeps_its_orgs_turn(transactional_db: None) -> None:
    driver = PostgresDriver(clock=FrozenClock(), fair_queues=[FAIR])
    clock = driver.clock
    assert isinstance(clock, FrozenClock)
    [first] = driver.enqueue_many([request(queue=FAIR, tenant_id="org-b")])
    assert [j.id for j in driver.claim(queues=[FAIR], limit=1, worker_id="w1").jobs] == [first.id]
    driver.enqueue_many([request(queue=FAIR, tenant_id="org-a") for _ in range(30)])
    clock.advance(1)

    staged, release, done = threading.Event(), threading.Event(), threading.Event()
    late: list[str] = []

    def enqueue_in_an_open_transaction() -> None:
        try:
            with transaction.atomic():
                late.append(driver.enqueue(request(queue=FAIR, tenant_id="org-b")).id)
                staged.set()
                release.wait(10)
        finally:
            connections.close_all()
            done.set()

    thread = threading.Thread(target=enqueue_in_an_open_transaction)
    thread.start()
    try:
        assert staged.wait(10)
        # org B's lane is held by the open enqueue: this claim serves org A and cannot retire org B
        taken = driver.claim(queues=[FAIR], limit=2, worker_id="w1").jobs
        assert [j.tenant_id for j in taken] == ["org-a", "org-a"]
    finally:
        release.set()
        thread.join(10)
    assert done.is_set()
    clock.advance(1)
    taken = driver.claim(queues=[FAIR], limit=2, worker_id="w1").jobs
    assert late[0] in [j.id for j in taken]  # committed now, and its org still has its turn
