"""The outbox on SQLite: ``x_outbox`` staged in the caller's ``atomic()`` block on the SQLite jobs database
(a rollback leaves no job), claimed under a lease, fenced on the claimant, published in stage order under
the row's own id, set aside and retried, purged; a stage in the relay's process wakes it on commit.

Tests run on committed rows (``transactional_db``); the clock is frozen, so leases lapse when a test says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.test import override_settings

from demo_project.shop.models import Order
from tests.conftest import installed
from ultimate_jobs import JobRun, job
from ultimate_jobs.contracts.jobs import Enqueued
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.drivers.sqlite.driver import SqliteDriver
from ultimate_jobs.drivers.sqlite.outbox import SqliteOutboxStore, sqlite_outbox_store
from ultimate_jobs.drivers.sqlite.rows import dashed
from ultimate_jobs.errors import InvariantError
from ultimate_jobs.outbox import OutboxRelay, OutboxRouter, outbox_relay
from ultimate_jobs.outbox.boot import build_outbox_store
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.django_db(transaction=True)]

LEASE_MS = 30_000


@dataclass
class Lite:
    clock: FrozenClock
    driver: SqliteDriver
    store: SqliteOutboxStore
    ran: list[str]
    create_invoice: Any

    def relay(self, **options: Any) -> OutboxRelay:
        options.setdefault("driver", self.driver)
        options.setdefault("relay_id", "relay-a")
        return outbox_relay(store=self.store, clock=self.clock, **options)

    def stage(self, *orders: str) -> list[Enqueued]:
        with transaction.atomic():
            return [self.create_invoice.enqueue({"order": o}) for o in orders]


@pytest.fixture
def lite(transactional_db: None) -> Iterator[Lite]:
    clock = FrozenClock()
    driver = SqliteDriver(clock=clock)
    store = sqlite_outbox_store(clock=clock, claim_lease_ms=LEASE_MS)
    ran: list[str] = []
    with installed(clock, driver):  # type: ignore[type-var]

        @job(idempotency_key=lambda i: f"invoice:{i['order']}", tenant="none", queue="outbox")
        def create_invoice(run: JobRun[Any]) -> None:
            ran.append(f"create_invoice:{run.input['order']}")

        set_jobs_router(OutboxRouter(store=store, driver=driver))
        try:
            yield Lite(clock, driver, store, ran, create_invoice)
        finally:
            set_jobs_router(None)


def rows() -> list[tuple[str, str | None, bool]]:
    """``(id, claimed_by, published)`` per x_outbox row, in claim order."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, claimed_by, published_at IS NOT NULL FROM x_outbox ORDER BY staged_at, id")
        return [(dashed(i), c, bool(p)) for i, c, p in cursor.fetchall()]


def job_ids() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM x_jobs ORDER BY created_at, id")
        return [dashed(r[0]) for r in cursor.fetchall()]


def test_the_store_built_from_settings_on_an_sqlite_database_is_the_sqlite_store(transactional_db: None) -> None:
    with override_settings(ULTIMATE_JOBS={"OUTBOX": "optional"}):
        assert isinstance(build_outbox_store(), SqliteOutboxStore)


def test_a_rolled_back_enqueue_leaves_no_job_and_a_committed_one_runs_once(lite: Lite) -> None:
    with pytest.raises(RuntimeError, match="payment declined"), transaction.atomic():
        Order.objects.create(org_id="org-1", number="r-1", total_cents=100)
        lost = lite.create_invoice.enqueue({"order": "r-1"})
        assert len(rows()) == 1  # staged on the caller's connection, inside its transaction
        raise RuntimeError("payment declined")
    assert rows() == [] and not Order.objects.filter(number="r-1").exists()

    with transaction.atomic():
        Order.objects.create(org_id="org-1", number="c-1", total_cents=100)
        kept = lite.create_invoice.enqueue({"order": "c-1"})
        assert job_ids() == []  # no job until the relay publishes the committed row
    relay = lite.relay()
    assert relay.run_once() == 1
    assert job_ids() == [kept.id]
    assert lite.driver.operator.get(kept.id).run_id == kept.run_id  # type: ignore[union-attr]
    run_jobs(lite.driver, clock=lite.clock)
    assert lite.ran == ["create_invoice:c-1"]
    assert lost.id not in job_ids()
    assert relay.run_once() == 0


def test_aenqueue_from_async_code_inside_atomic_joins_the_transaction_as_enqueue_does(lite: Lite) -> None:
    """``async_to_sync`` from inside ``atomic()`` into code that awaits ``aenqueue``/``aenqueue_many``: the
    enqueues run back on this thread, on the SQLite transaction's connection — a rollback leaves no job."""

    async def checkout(order: str) -> list[Enqueued]:
        return [
            await lite.create_invoice.aenqueue({"order": order}),
            *await lite.create_invoice.aenqueue_many([{"order": f"{order}-bis"}]),
        ]

    with pytest.raises(RuntimeError, match="payment declined"), transaction.atomic():
        Order.objects.create(org_id="org-1", number="r-1", total_cents=100)
        lost = async_to_sync(checkout)("r-1")
        assert len(rows()) == 2 and job_ids() == []  # staged inside this transaction
        raise RuntimeError("payment declined")
    assert rows() == [] and not Order.objects.filter(number="r-1").exists()

    with transaction.atomic():
        kept = async_to_sync(checkout)("c-1")
        assert job_ids() == []
    assert lite.relay().run_once() == 2
    assert sorted(job_ids()) == sorted(k.id for k in kept) and not {e.id for e in lost} & set(job_ids())
    run_jobs(lite.driver, clock=lite.clock)
    assert sorted(lite.ran) == ["create_invoice:c-1", "create_invoice:c-1-bis"]


def test_a_duplicate_staged_id_is_refused_and_the_callers_transaction_goes_on(lite: Lite) -> None:
    (staged,) = lite.stage("o-1")
    request = lite.store.claim(claimant="r", limit=1)[0].request
    with transaction.atomic():
        with pytest.raises(InvariantError, match="already staged"):
            lite.store.stage([request])
        Order.objects.create(org_id="org-1", number="d-1", total_cents=100)
    assert Order.objects.filter(number="d-1").exists() and [r[0] for r in rows()] == [staged.id]


def test_claim_stamps_a_lease_that_a_second_relay_cannot_take_until_it_lapses(lite: Lite) -> None:
    staged = lite.stage("o-1", "o-2")
    a = lite.store.claim(claimant="relay-a", limit=10)
    assert [r.id for r in a] == [e.id for e in staged] and a[0].claimed_at_ms == lite.clock.now_ms()
    assert lite.store.claim(claimant="relay-b", limit=10) == []
    lite.clock.advance(LEASE_MS - 1)
    assert lite.store.claim(claimant="relay-b", limit=10) == []
    lite.clock.advance(1)
    b = lite.store.claim(claimant="relay-b", limit=10)
    assert [r.id for r in b] == [e.id for e in staged] and b[0].claimed_by != a[0].claimed_by
    ids = [e.id for e in staged]
    stale = a[0].claimed_by
    assert stale is not None and b[0].claimed_by is not None
    assert lite.store.release(ids, claimed_by=stale) == frozenset()
    assert lite.store.mark_published(ids, claimed_by=stale) == frozenset()
    assert lite.store.mark_published(["not-a-uuid"], claimed_by=stale) == frozenset()
    assert lite.store.release(ids[1:], claimed_by=b[0].claimed_by) == frozenset(ids[1:])
    assert lite.store.mark_published(ids[:1], claimed_by=b[0].claimed_by) == frozenset(ids[:1])
    assert lite.store.backlog() == 1
    assert [r[1:] for r in rows()] == [(b[0].claimed_by, True), (None, False)]


def test_a_set_aside_row_is_listed_retried_or_removed_and_published_rows_are_purged(lite: Lite) -> None:
    first, second = lite.stage("o-1", "o-2")
    claimed_first, _ = lite.store.claim(claimant="r", limit=10)
    token = claimed_first.claimed_by
    assert token is not None
    assert lite.store.set_aside([first.id], claimed_by=token, error="bad run_at") == {first.id}
    assert lite.store.mark_published([second.id], claimed_by=token) == {second.id}
    stats = lite.store.stats()
    assert (stats.pending, stats.failed, stats.oldest_pending_ms) == (0, 1, None)
    (failed,) = lite.store.failed(limit=10)
    assert (failed.id, failed.error) == (first.id, "bad run_at")
    assert lite.store.retry_failed([first.id, second.id]) == {first.id}
    assert lite.store.stats().pending == 1 and lite.store.remove_failed([first.id]) == frozenset()
    lite.clock.advance(1)
    assert lite.store.purge_published(before_ms=lite.clock.now_ms(), limit=10) == 1
    assert [r[0] for r in rows()] == [first.id]


def test_a_stage_in_the_relays_process_wakes_it_on_commit_only(lite: Lite) -> None:
    heard: list[str] = []
    unsubscribe = lite.store.subscribe(heard.append)
    with pytest.raises(RuntimeError), transaction.atomic():
        lite.create_invoice.enqueue({"order": "x"})
        raise RuntimeError("rolled back: nothing to wake for")
    assert heard == []
    lite.stage("o-1")
    assert heard == [""]
    unsubscribe()
    assert lite.store.wake_is_live() is False
