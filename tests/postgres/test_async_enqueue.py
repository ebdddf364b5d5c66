"""``await handle.aenqueue(...)`` and ``await handle.aenqueue_many(...)`` from async code (pytest-asyncio
tests): the same rows, answers and refusals as ``enqueue``/``enqueue_many``, without blocking the event
loop, drained by ``run_jobs`` — on the memory and Postgres drivers here, on SQLite
(tests/sqlite/test_async_enqueue_sqlite.py) and Redis (tests/redis/test_redis_async_enqueue.py) with the
same bodies. Inside ``transaction.atomic()`` the outbox rules hold as for ``enqueue``: the outbox tests of
each driver; a run's org bounds them: tests/security/test_cross_org_work.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pydantic
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from tests.conftest import ON_POSTGRES, AnyJobsEnv
from ultimate_jobs import JobRun, job
from ultimate_jobs.contracts.jobs import Enqueued, EnqueueRequest
from ultimate_jobs.contracts.operator import JobFilter
from ultimate_jobs.core.routing import DirectRouter, set_jobs_router
from ultimate_jobs.drivers.postgres.wake import conninfo_for
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import run_jobs

WAIT = 5.0  # the bound on the one cross-thread wait; a passing test never spends it


class Charge(pydantic.BaseModel):
    order_id: str
    cents: int = pydantic.Field(ge=0)


@pytest.fixture(autouse=True)
def executor_connections_closed() -> Iterator[None]:
    """``sync_to_async`` ran the enqueues on asgiref's thread-sensitive thread, which opened a connection of
    its own: close it after the test, as the end of a request would."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


def declare(ran: list[str]) -> Any:
    @job(name="charge", input=Charge, idempotency_key=lambda i: f"charge:{i.order_id}", tenant="none")
    def charge(run: JobRun[Charge]) -> str:
        ran.append(run.input.order_id)
        return run.input.order_id

    return charge


def row_of(env: AnyJobsEnv, job_id: str) -> Any:
    assert env.driver.operator is not None
    return env.driver.operator.get(job_id)


def count_rows(env: AnyJobsEnv) -> int:
    assert env.driver.operator is not None
    return len(env.driver.operator.list(JobFilter()).rows)


# the reads are sync database calls: from a test's event loop they go through sync_to_async
row = sync_to_async(row_of)
rows = sync_to_async(count_rows)


@pytest.mark.asyncio
async def test_aenqueue_writes_the_row_enqueue_would_and_run_jobs_drains_it(any_jobs: AnyJobsEnv) -> None:
    ran: list[str] = []
    charge = declare(ran)
    first = await charge.aenqueue({"order_id": "o-1", "cents": 4250})
    again = await charge.aenqueue(Charge(order_id="o-1", cents=4250))
    later = await charge.aenqueue({"order_id": "o-2", "cents": 1}, queue="payments-slow", delay="10m")
    assert isinstance(first, Enqueued) and not first.deduped
    assert (again.id, again.run_id, again.deduped) == (first.id, first.run_id, True)  # a live key: the same job
    stored = await row(any_jobs, later.id)
    assert (stored.queue, stored.run_at_ms) == ("payments-slow", any_jobs.clock.now_ms() + 600_000)
    assert stored.input == {"order_id": "o-2", "cents": 1} and stored.idempotency_key == "charge:o-2"

    report = await sync_to_async(run_jobs)(any_jobs.driver, clock=any_jobs.clock, queues=["default"])
    assert report.outcomes == {"completed": 1} and ran == ["o-1"]
    assert (await row(any_jobs, first.id)).state == "done"


@pytest.mark.asyncio
async def test_aenqueue_many_writes_one_row_per_input_in_order_or_none(any_jobs: AnyJobsEnv) -> None:
    ran: list[str] = []
    charge = declare(ran)
    answers = await charge.aenqueue_many(({"order_id": f"o-{n}", "cents": n} for n in range(3)), delay="1m")
    stored = [await row(any_jobs, a.id) for a in answers]
    assert [r.input["order_id"] for r in stored] == ["o-0", "o-1", "o-2"]
    assert {r.run_at_ms for r in stored} == {any_jobs.clock.now_ms() + 60_000}

    with pytest.raises(UltimateError) as caught:  # the third input is bad: no row for the first two either
        await charge.aenqueue_many([{"order_id": "o-7", "cents": 7}, {"order_id": "o-8", "cents": 8}, {"cents": -1}])
    assert caught.value.code == "X_VALIDATION"
    with pytest.raises(UltimateError) as caught:  # one input where a list belongs
        await charge.aenqueue_many({"order_id": "o-9", "cents": 9})
    assert caught.value.code == "X_VALIDATION" and "list of inputs" in caught.value.message
    assert await rows(any_jobs) == 3 and await charge.aenqueue_many([]) == []

    report = await sync_to_async(run_jobs)(any_jobs.driver, clock=any_jobs.clock)
    assert report.outcomes == {"completed": 3} and ran == ["o-0", "o-1", "o-2"]


@pytest.mark.asyncio
async def test_aenqueue_refuses_what_enqueue_refuses_with_the_same_codes(any_jobs: AnyJobsEnv) -> None:
    charge = declare([])
    first = await charge.aenqueue({"order_id": "o-1", "cents": 1})
    for call, code in [
        (lambda: charge.aenqueue({"order_id": "o-1", "cents": 1}, on_conflict="error"), "X_JOB_DUPLICATE"),
        (lambda: charge.aenqueue({"cents": 2}), "X_VALIDATION"),
        (lambda: charge.aenqueue({"order_id": "o-3", "cents": 1}, run_id="not-a-uuid"), "X_JOB_REQUEST_INVALID"),
        (lambda: charge.aenqueue({"order_id": "o-4", "cents": 1}, delay="1m", run_at=0), "X_JOB_REQUEST_INVALID"),
    ]:
        with pytest.raises(UltimateError) as caught:
            await call()
        assert caught.value.code == code, caught.value
    assert await rows(any_jobs) == 1 and (await row(any_jobs, first.id)).state == "ready"


class Held(DirectRouter):
    """The direct router, holding each enqueue until ``released`` is set (or :data:`WAIT` passes)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.released_in_time: list[bool] = []

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        self.entered.set()
        self.released_in_time.append(self.released.wait(WAIT))
        return super().enqueue_many(requests)

    def enqueue(self, request: EnqueueRequest) -> Enqueued:
        return self.enqueue_many([request])[0]


@pytest.mark.asyncio
@pytest.mark.parametrize("any_jobs", ["memory"], indirect=True)  # Postgres: the test below holds its table
async def test_aenqueue_does_not_block_the_event_loop(any_jobs: AnyJobsEnv) -> None:
    """While an enqueue waits on its database, other coroutines on the loop run: here the one that releases it."""
    charge = declare([])
    held = Held()
    set_jobs_router(held)
    try:

        async def release() -> None:
            assert await asyncio.to_thread(held.entered.wait, WAIT)
            held.released.set()  # runs only if the loop is free while the enqueue is held

        one, many, _ = await asyncio.gather(
            charge.aenqueue({"order_id": "o-1", "cents": 1}),
            charge.aenqueue_many([{"order_id": "o-2", "cents": 2}]),
            release(),
        )
    finally:
        set_jobs_router(None)
    assert held.released_in_time == [True, True]
    assert await row(any_jobs, one.id) is not None and await row(any_jobs, many[0].id) is not None


@pytest.mark.asyncio
@pytest.mark.parametrize("any_jobs", [pytest.param("postgres", marks=ON_POSTGRES)], indirect=True)
async def test_on_postgres_aenqueue_writes_from_the_loop_and_waits_on_the_database_without_blocking_it(
    any_jobs: AnyJobsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No thread hop: the enqueue's statements run on a connection of the loop's own, awaited — while another
    session holds x_jobs locked, the enqueue waits in the database and the loop runs the coroutine that
    lets it go."""

    def no_hop(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("aenqueue hopped to a thread")

    monkeypatch.setattr("ultimate_jobs.core.routing.sync_to_async", no_hop)
    charge = declare([])
    settings_dict = connections["default"].settings_dict
    locker = await psycopg.AsyncConnection.connect(conninfo_for(settings_dict), autocommit=False)
    try:
        await locker.execute("LOCK TABLE x_jobs IN EXCLUSIVE MODE")  # an INSERT waits for it

        async def release() -> None:
            async with await psycopg.AsyncConnection.connect(conninfo_for(settings_dict), autocommit=True) as peek:
                for _ in range(int(WAIT / 0.01)):
                    waiting = await (
                        await peek.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND query LIKE '%%INSERT INTO x_jobs%%' AND datname = current_database()"
                        )
                    ).fetchone()
                    if waiting and waiting[0] == 2:
                        break
                    await asyncio.sleep(0.01)  # the loop's own turn: the enqueues wait in the database meanwhile
                else:
                    raise AssertionError("the enqueues never reached the database")
            await locker.commit()

        one, many, _ = await asyncio.gather(
            charge.aenqueue({"order_id": "o-1", "cents": 1}),
            charge.aenqueue_many([{"order_id": "o-2", "cents": 2}, {"order_id": "o-3", "cents": 3}]),
            release(),
        )
    finally:
        await locker.close()
    assert not one.deduped and [m.deduped for m in many] == [False, False]
    assert await rows(any_jobs) == 3
    assert (await charge.aenqueue({"order_id": "o-1", "cents": 1})).id == one.id  # dedupe, from the loop too
    await any_jobs.driver.async_enqueue.close()  # type: ignore[union-attr]


@pytest.mark.asyncio
@pytest.mark.parametrize("any_jobs", [pytest.param("postgres", marks=ON_POSTGRES)], indirect=True)
async def test_on_postgres_a_required_outbox_refuses_a_native_aenqueue_as_enqueue_outside_a_transaction(
    any_jobs: AnyJobsEnv,
) -> None:
    from ultimate_jobs.outbox import OutboxRouter, postgres_outbox_store

    charge = declare([])
    set_jobs_router(OutboxRouter(store=postgres_outbox_store(), mode="required"))
    try:
        with pytest.raises(UltimateError) as caught:
            await charge.aenqueue({"order_id": "o-1", "cents": 1})
    finally:
        set_jobs_router(None)
    assert caught.value.code == "X_OUTBOX_NO_TX" and await rows(any_jobs) == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("any_jobs", [pytest.param("postgres", marks=ON_POSTGRES)], indirect=True)
async def test_on_postgres_an_unreachable_database_is_x_driver_unavailable_at_the_aenqueue(
    any_jobs: AnyJobsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    charge = declare([])
    with monkeypatch.context() as patched, pytest.raises(UltimateError) as caught:
        patched.setattr(
            "ultimate_jobs.drivers.postgres.async_enqueue.conninfo_for",
            lambda settings_dict: "host=127.0.0.1 port=1 dbname=nowhere user=postgres connect_timeout=2",
        )
        await charge.aenqueue({"order_id": "o-1", "cents": 1})
    assert caught.value.code == "X_DRIVER_UNAVAILABLE" and "DATABASES['default']" in caught.value.message
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert not (await charge.aenqueue({"order_id": "o-1", "cents": 1})).deduped  # the loop's next try connects
    await any_jobs.driver.async_enqueue.close()  # type: ignore[union-attr]


def test_an_async_body_aenqueues_for_its_own_org_and_is_refused_for_another(any_jobs: AnyJobsEnv) -> None:
    """Inside an async run the org scope follows ``aenqueue`` onto the thread it runs on: the run's own
    org goes through, another org is ``X_TENANCY_ACTOR_MISMATCH`` with nothing written."""
    notified: list[str] = []

    @job(name="notify", idempotency_key=lambda i: f"notify:{i['org_id']}", tenant=lambda i: i["org_id"])
    async def notify(run: JobRun[Any]) -> None:
        notified.append(run.input["org_id"])

    @job(name="fan-out", idempotency_key=lambda i: "fan-out", tenant=lambda i: i["org_id"], retry={"attempts": 1})
    async def fan_out(run: JobRun[Any]) -> str | None:
        await notify.aenqueue({"org_id": run.input["org_id"]})
        try:
            await notify.aenqueue_many([{"org_id": "org-b"}])
        except UltimateError as refusal:
            return refusal.code
        return None

    fan_out.enqueue({"org_id": "org-a"})
    report = run_jobs(any_jobs.driver, clock=any_jobs.clock)
    assert report.outcomes == {"completed": 2}
    assert [e.result for e in report.executions if e.name == "fan-out"] == ["X_TENANCY_ACTOR_MISMATCH"]
    assert notified == ["org-a"] and count_rows(any_jobs) == 2
