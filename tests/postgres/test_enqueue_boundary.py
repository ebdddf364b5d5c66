"""The enqueue boundary, attacked as a careless caller would, against the Postgres driver and the outbox.

Every request no database can store is refused at the call with ``X_JOB_REQUEST_INVALID`` naming the
field — before any statement runs, so inside ``transaction.atomic()`` the caller's own writes still
commit, and the outbox never holds a row its relay cannot publish. The same requests on the memory
driver are refused the same way (the boundary is above the drivers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, transaction

from demo_project.shop.models import Order
from tests.conftest import installed
from ultimate_jobs import JobRun, job
from ultimate_jobs.core.routing import jobs_router, set_jobs_router
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.guards.admission import MAX_JSON_DEPTH
from ultimate_jobs.outbox import OutboxRouter, outbox_relay, postgres_outbox_store
from ultimate_jobs.testing import FrozenClock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

NUL = "\u0000"


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"next": value}
    return value


@pytest.fixture(params=["postgres", "memory"])
def driver(request: pytest.FixtureRequest) -> Iterator[PostgresDriver | MemoryDriver]:
    clock = FrozenClock()
    chosen = PostgresDriver(clock=clock) if request.param == "postgres" else MemoryDriver(clock=clock)
    with installed(clock, chosen):
        yield chosen


def declare() -> Any:
    # the key function turns the word NUL into the byte: a key built from clean input can still carry one
    @job(name="ship", idempotency_key=lambda i: str(i.get("key", "k")).replace("NUL", NUL), tenant="none")
    def ship(run: JobRun[Any]) -> None:
        return None

    return ship


BAD_REQUESTS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "a NUL byte in an input value": (lambda h: h.enqueue({"note": f"a{NUL}b"}), "input.note"),
    "a NUL byte in an input key": (lambda h: h.enqueue({f"k{NUL}": 1}), "a key of input"),
    "a lone surrogate in an input value": (lambda h: h.enqueue({"note": "x\ud800y"}), "input.note"),
    "a NUL byte deep in a list": (lambda h: h.enqueue({"items": [{"sku": f"x{NUL}"}]}), "input.items[0].sku"),
    "a NUL byte in the idempotency key": (lambda h: h.enqueue({"key": "kNUL"}), "idempotency_key"),
    "a NUL byte in the queue": (lambda h: h.enqueue({}, queue=f"q{NUL}"), "queue"),
    "a blank queue": (lambda h: h.enqueue({}, queue=""), "queue"),
    "a queue of spaces": (lambda h: h.enqueue({}, queue="   "), "queue"),
    "input nested 1,000 deep": (lambda h: h.enqueue(nested(1_000)), "nests deeper"),
    "input nested one level too deep": (lambda h: h.enqueue(nested(MAX_JSON_DEPTH + 1)), "nests deeper"),
    "a run_id that is not a UUID": (lambda h: h.enqueue({}, run_id="run-1"), "run_id"),
    "run_at in nanoseconds": (lambda h: h.enqueue({}, run_at=1_700_000_000_000_000_000), "run_at"),
    "run_at of 10**20": (lambda h: h.enqueue({}, run_at=10**20), "run_at"),
    "run_at as text": (lambda h: h.enqueue({}, run_at="tomorrow"), "run_at"),
    "run_at as a bool": (lambda h: h.enqueue({}, run_at=True), "run_at"),
    "a naive run_at": (lambda h: h.enqueue({}, run_at=datetime(2030, 1, 1)), "run_at"),
    "delay of 10**30 ms": (lambda h: h.enqueue({}, delay=10**30), "delay"),
    "a negative int delay": (lambda h: h.enqueue({}, delay=-5000), "delay"),
    "a negative text delay": (lambda h: h.enqueue({}, delay="-5s"), "delay"),
    "delay as nonsense": (lambda h: h.enqueue({}, delay="soon"), "delay"),
    "delay and run_at": (lambda h: h.enqueue({}, delay="1s", run_at=datetime(2030, 1, 1, tzinfo=UTC)), "delay"),
}


@pytest.mark.parametrize("why", list(BAD_REQUESTS))
def test_a_request_no_database_can_store_is_refused_at_the_call(driver: Any, why: str) -> None:
    attack, field = BAD_REQUESTS[why]
    handle = declare()
    with pytest.raises(UltimateError) as caught:
        attack(handle)
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


@pytest.mark.parametrize("run_at", [10**20, 1_700_000_000_000_000_000])
def test_the_outbox_refuses_an_unpublishable_row_at_staging(run_at: int) -> None:
    """The repro that wedged the outbox: a run_at past Postgres's range staged inside atomic()."""
    clock = FrozenClock()
    driver = PostgresDriver(clock=clock)
    store = postgres_outbox_store(clock=clock)
    with installed(clock, driver):
        handle = declare()
        set_jobs_router(OutboxRouter(store=store, driver=driver))
        try:
            with transaction.atomic():
                with pytest.raises(UltimateError) as caught:
                    handle.enqueue({"key": "late"}, run_at=run_at)
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
