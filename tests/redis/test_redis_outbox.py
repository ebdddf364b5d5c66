"""The outbox on the Redis driver: rows still stage in Postgres, inside the caller's transaction, and
the relay publishes the committed ones onto Redis under their own ids."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.db import transaction

from tests.conftest import installed
from ultimate_jobs import JobRun, job
from ultimate_jobs.contracts.jobs import Enqueued
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.drivers.redis import RedisDriver
from ultimate_jobs.outbox import OutboxRouter, outbox_relay, postgres_outbox_store
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def driver(redis_client: redis.Redis, clock: FrozenClock) -> RedisDriver:
    return RedisDriver(redis_client, clock=clock)


@pytest.mark.parametrize("call", ["enqueue", "aenqueue from async code", "aenqueue_many from async code"])
def test_the_relay_publishes_committed_rows_onto_redis_with_their_ids(
    transactional_db: None, driver: RedisDriver, clock: FrozenClock, call: str
) -> None:
    """Sync ``enqueue`` in ``atomic()``, or async code entered from it (``async_to_sync``) that awaits
    ``aenqueue``/``aenqueue_many``: both stage in Postgres, in the caller's transaction."""
    store = postgres_outbox_store(clock=clock, claim_lease_ms=30_000)
    ran: list[str] = []
    with installed(clock, driver):

        @job(idempotency_key=lambda i: f"invoice:{i['order']}", tenant="none", queue="outbox")
        def create_invoice(run: JobRun[Any]) -> None:
            ran.append(run.input["order"])

        enqueue: Callable[[dict[str, Any]], Enqueued] = {
            "enqueue": create_invoice.enqueue,
            "aenqueue from async code": async_to_sync(create_invoice.aenqueue),
            "aenqueue_many from async code": lambda i: async_to_sync(create_invoice.aenqueue_many)([i])[0],
        }[call]
        set_jobs_router(OutboxRouter(store=store, driver=driver))
        try:
            with pytest.raises(RuntimeError), transaction.atomic():
                lost = enqueue({"order": "rolled-back"})
                raise RuntimeError("declined")
            with transaction.atomic():
                kept = enqueue({"order": "committed"})
                assert driver.operator.get(kept.id) is None  # staged in Postgres, not on Redis yet
            relay = outbox_relay(store=store, driver=driver, clock=clock, relay_id="relay-r")
            assert relay.run_once() == 1
            row = driver.operator.get(kept.id)
            assert row is not None and (row.run_id, row.state) == (kept.run_id, "ready")
            assert driver.operator.get(lost.id) is None
            assert relay.run_once() == 0
            run_jobs(driver, clock=clock)
            assert ran == ["committed"]
        finally:
            set_jobs_router(None)
