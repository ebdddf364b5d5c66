"""The enqueue boundary, attacked as a careless caller would, against the Postgres driver and the outbox.

Every request no database can store is refused at the call with ``X_JOB_REQUEST_INVALID`` naming the
field — before any statement runs, so inside ``transaction.atomic()`` the caller's own writes still
commit, and the outbox never holds a row its relay cannot publish. The same requests on the memory
driver are refused the same way (the boundary is above the drivers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from demo_project.shop.models import Order
from tests.bad_requests import BAD_REQUESTS, NUL, nul_key
from tests.conftest import installed
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.routing import jobs_router, set_jobs_router
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.outbox import OutboxRouter, outbox_relay, postgres_outbox_store
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(params=["postgres", "memory"])
def driver(request: pytest.FixtureRequest) -> Iterator[PostgresDriver | MemoryDriver]:
    clock = FrozenClock()
    chosen = PostgresDriver(clock=clock) if request.param == "postgres" else MemoryDriver(clock=clock)
    with installed(clock, chosen):
        yield chosen


def declare() -> Any:
    @job(name="ship", idempotency_key=nul_key, tenant="none")
    def ship(run: JobRun[Any]) -> None:
        return None

    return ship


@pytest.mark.parametrize("why", list(BAD_REQUESTS))
def test_a_request_no_database_can_store_is_refused_at_the_call(driver: Any, why: str) -> None:
    value, options, field = BAD_REQUESTS[why]
    handle = declare()
    with pytest.raises(UltimateError) as caught:
        handle.enqueue(value, **options)
    assert caught.value.code == "X_JOB_REQUEST_INVALID", caught.value
    assert field in caught.value.message and "ship" in caught.value.message
    assert driver.stats() == []  # nothing was written


def test_a_hand_built_batch_is_checked_by_the_router_before_any_row(driver: Any) -> None:
    handle = declare()
    good = handle.build_request({"key": "a"})
    bad = handle.build_request({"key": "b"}).__class__(**{**_fields(good), "idempotency_key": f"b{NUL}"})
    with pytest.raises(UltimateError) as caught:
        jobs_router().enqueue_many([good, bad])
    assert caught.value.code == "X_JOB_REQUEST_INVALID"
    assert driver.stats() == []  # all or nothing: the good one was not written either


def test_a_refusal_inside_atomic_leaves_the_callers_transaction_usable() -> None:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)):
        handle = declare()
        with transaction.atomic():
            Order.objects.create(org_id="org-1", number="1", total_cents=100)
            with pytest.raises(UltimateError):
                handle.enqueue({"note": f"a{NUL}b"})
            Order.objects.create(org_id="org-1", number="2", total_cents=200)  # the transaction was not aborted
            handle.enqueue({"key": "fine"})
    assert Order.objects.count() == 2
    assert [s.ready for s in PostgresDriver(clock=clock).stats()] == [1]


@pytest.mark.parametrize("why", list(BAD_REQUESTS))
def test_the_outbox_refuses_an_unpublishable_row_at_staging(why: str) -> None:
    """The repro that wedged the outbox (a run_at past Postgres's range staged inside atomic()), and the
    rest of the set: refused at the stage, the caller's transaction goes on, the relay publishes the rest."""
    value, options, _ = BAD_REQUESTS[why]
    clock = FrozenClock()
    driver = PostgresDriver(clock=clock)
    store = postgres_outbox_store(clock=clock)
    with installed(clock, driver):
        handle = declare()
        set_jobs_router(OutboxRouter(store=store, driver=driver))
        try:
            with transaction.atomic():
                with pytest.raises(UltimateError) as caught:
                    handle.enqueue(value, **options)
                handle.enqueue({"key": "after"})
        finally:
            set_jobs_router(None)
        assert caught.value.code == "X_JOB_REQUEST_INVALID"
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM x_outbox")
            assert cursor.fetchone() == (1,)
        assert outbox_relay(store=store, driver=driver, clock=clock).run_once() == 1


def _fields(request: Any) -> dict[str, Any]:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}
