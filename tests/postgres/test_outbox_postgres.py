"""The outbox on Postgres: ``x_outbox`` staged in the caller's ``atomic()`` block (a rollback leaves no
job), claimed under a lease, fenced on the claimant, published in stage order under the row's own id,
announced on ``x_outbox_wake`` — throttled, on COMMIT only.

Tests run on committed rows (``transactional_db``): the relay's statements run outside the caller's
transaction, as they do in production. The clock is frozen, so leases lapse when a test says so.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from demo_project.shop.models import Order
from tests.conftest import installed
from tests.helpers import eventually
from ultimate_jobs import JobRun, job
from ultimate_jobs.contracts.jobs import Enqueued, EnqueueRequest
from ultimate_jobs.contracts.outbox import publish_request
from ultimate_jobs.core.routing import set_jobs_router
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.drivers.postgres.executor import django_executor
from ultimate_jobs.drivers.postgres.queries import outbox as outbox_sql
from ultimate_jobs.drivers.postgres.wake import PROBE_PREFIX, conninfo_for
from ultimate_jobs.drivers.sql.executor import Binding
from ultimate_jobs.errors import InvariantError, OutboxNoTxError
from ultimate_jobs.outbox import (
    OUTBOX_WAKE_CHANNEL,
    OutboxRelay,
    OutboxRouter,
    PostgresOutboxStore,
    outbox_relay,
    postgres_outbox_store,
)
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LEASE_MS = 30_000
WAIT = 5.0  # the bound on every cross-thread wait; a passing test never spends it


@dataclass
class Pg:
    """A frozen clock, the Postgres driver and outbox store over it, the router installed, the jobs."""

    clock: FrozenClock
    driver: PostgresDriver
    store: PostgresOutboxStore
    router: OutboxRouter
    ran: list[str]
    create_invoice: Any
    charge_card: Any

    def relay(self, **options: Any) -> OutboxRelay:
        options.setdefault("driver", self.driver)
        options.setdefault("relay_id", "relay-a")
        return outbox_relay(store=self.store, clock=self.clock, **options)

    def stage(self, *orders: str) -> list[Enqueued]:
        with transaction.atomic():
            return [self.create_invoice.enqueue({"order": o}) for o in orders]


@pytest.fixture
def pg(transactional_db: None) -> Iterator[Pg]:
    clock = FrozenClock()
    driver = PostgresDriver(clock=clock)
    store = postgres_outbox_store(clock=clock, claim_lease_ms=LEASE_MS)
    router = OutboxRouter(store=store, driver=driver)
    ran: list[str] = []
    with installed(clock, driver):

        @job(idempotency_key=lambda i: f"invoice:{i['order']}", tenant="none", queue="outbox")
        def create_invoice(run: JobRun[Any]) -> None:
            ran.append(f"create_invoice:{run.input['order']}")

        @job(idempotency_key=lambda i: f"charge:{i['order']}", tenant="none", queue="outbox")
        def charge_card(run: JobRun[Any]) -> None:
            ran.append(f"charge_card:{run.input['order']}")

        set_jobs_router(router)
        try:
            yield Pg(clock, driver, store, router, ran, create_invoice, charge_card)
        finally:
            set_jobs_router(None)


def query(sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def outbox_rows() -> list[tuple[Any, ...]]:
    """``(id, claimed_by, published)`` per x_outbox row, in claim order."""
    return query(
        "SELECT id::text, claimed_by, published_at IS NOT NULL FROM x_outbox ORDER BY staged_at, id",
    )


def job_ids() -> list[str]:
    return [r[0] for r in query("SELECT id::text FROM x_jobs ORDER BY created_at, id")]


class Recording:
    """The Postgres driver, recording each batch's idempotency keys, with a one-shot hook before one."""

    def __init__(self, inner: PostgresDriver) -> None:
        self.inner = inner
        self.name = inner.name
        self.batches: list[list[str]] = []
        self.before: Callable[[], None] | None = None
        self.refuse: set[str] = set()

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        if self.before is not None:
            hook, self.before = self.before, None
            hook()
        self.batches.append([r.idempotency_key for r in requests])
        if any(r.idempotency_key in self.refuse for r in requests):
            raise ConnectionError("the queue is down")
        return self.inner.enqueue_many(requests)


# -- joining the caller's transaction --------------------------------------------------------------


def test_a_rolled_back_enqueue_leaves_no_job_and_a_committed_one_runs_once(pg: Pg) -> None:
    with pytest.raises(RuntimeError, match="payment declined"), transaction.atomic():
        Order.objects.create(org_id="org-1", number="r-1", total_cents=100)
        lost = pg.create_invoice.enqueue({"order": "r-1"})
        assert len(outbox_rows()) == 1  # staged on the caller's connection, inside its transaction
        raise RuntimeError("payment declined")
    assert outbox_rows() == [] and not Order.objects.filter(number="r-1").exists()

    with transaction.atomic():
        Order.objects.create(org_id="org-1", number="c-1", total_cents=100)
        kept = pg.create_invoice.enqueue({"order": "c-1"})
        assert job_ids() == []  # no job until the relay publishes the committed row
    relay = pg.relay()
    assert relay.run_once() == 1
    assert job_ids() == [kept.id]
    assert query("SELECT run_id::text FROM x_jobs WHERE id = %s", [kept.id]) == [(kept.run_id,)]
    run_jobs(pg.driver, clock=pg.clock)
    assert pg.ran == ["create_invoice:c-1"]
    assert lost.id not in job_ids()
    assert relay.run_once() == 0


def test_aenqueue_from_async_code_inside_atomic_joins_the_transaction_as_enqueue_does(pg: Pg) -> None:
    """Sync code holding ``atomic()`` calls async code (``async_to_sync``) that awaits ``aenqueue``: the
    enqueue runs back on this thread (``thread_sensitive``), on the transaction's connection — so it stages,
    a rollback leaves no job and a commit publishes — and outside a transaction ``required`` refuses it."""

    async def checkout(order: str) -> list[Enqueued]:
        one = await pg.create_invoice.aenqueue({"order": order})
        return [one, *await pg.charge_card.aenqueue_many([{"order": order}])]

    with pytest.raises(RuntimeError, match="payment declined"), transaction.atomic():
        Order.objects.create(org_id="org-1", number="r-1", total_cents=100)
        lost = async_to_sync(checkout)("r-1")
        assert len(outbox_rows()) == 2 and job_ids() == []  # staged in this transaction, not published
        raise RuntimeError("payment declined")
    assert outbox_rows() == [] and not Order.objects.filter(number="r-1").exists()

    with transaction.atomic():
        Order.objects.create(org_id="org-1", number="c-1", total_cents=100)
        kept = async_to_sync(checkout)("c-1")
        assert job_ids() == []
    assert pg.relay().run_once() == 2
    assert sorted(job_ids()) == sorted(k.id for k in kept) and not {e.id for e in lost} & set(job_ids())
    run_jobs(pg.driver, clock=pg.clock)
    assert sorted(pg.ran) == ["charge_card:c-1", "create_invoice:c-1"]

    set_jobs_router(OutboxRouter(store=pg.store, driver=pg.driver, mode="required"))
    with pytest.raises(OutboxNoTxError):
        async_to_sync(checkout)("o-2")
    assert len(outbox_rows()) == 2 and len(job_ids()) == 2


def test_the_row_written_carries_the_whole_request_and_its_ids(pg: Pg) -> None:
    with transaction.atomic():
        answer = pg.create_invoice.enqueue({"order": "o-1"}, delay="1m", queue="billing")
    ((row_id, run_id, name, queue, request, staged_ms, claimed, published),) = query(
        "SELECT id::text, run_id::text, name, queue, request, (extract(epoch from staged_at) * 1000)::bigint, "
        "claimed_at, published_at FROM x_outbox"
    )
    assert (row_id, run_id, name, queue) == (answer.id, answer.run_id, "create_invoice", "billing")
    assert (staged_ms, claimed, published) == (pg.clock.now_ms(), None, None)
    request = request if isinstance(request, dict) else json.loads(request)
    assert request["input"] == {"order": "o-1"} and request["run_at_ms"] == pg.clock.now_ms() + 60_000
    assert (request["id"], request["run_id"], request["on_conflict"]) == (answer.id, answer.run_id, "dedupe")


def test_optional_publishes_directly_outside_a_transaction_and_required_refuses(pg: Pg) -> None:
    direct = pg.create_invoice.enqueue({"order": "o-1"})
    assert job_ids() == [direct.id] and outbox_rows() == []

    set_jobs_router(OutboxRouter(store=pg.store, driver=pg.driver, mode="required"))
    with pytest.raises(OutboxNoTxError) as caught:
        pg.create_invoice.enqueue({"order": "o-2"})
    assert caught.value.code == "X_OUTBOX_NO_TX"
    assert outbox_rows() == [] and job_ids() == [direct.id]
    with transaction.atomic():
        staged = pg.create_invoice.enqueue({"order": "o-2"})
    assert [r[0] for r in outbox_rows()] == [staged.id]


def test_in_transaction_means_an_atomic_block_or_autocommit_off_on_the_jobs_database(pg: Pg) -> None:
    assert pg.store.in_transaction() is False
    with transaction.atomic():
        assert pg.store.in_transaction() is True
    transaction.set_autocommit(False)
    try:
        assert pg.store.in_transaction() is True
        pg.create_invoice.enqueue({"order": "manual"})
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert outbox_rows() == []


def test_a_duplicate_staged_id_is_refused_and_rolls_back_with_the_transaction(pg: Pg) -> None:
    request = pg.create_invoice.build_request({"order": "o-1"})
    staged = publish_request_for(request)
    pg.store.stage([staged])
    with pytest.raises(InvariantError, match="already staged") as caught, transaction.atomic():
        pg.store.stage([staged])
    assert caught.value.code == "X_INVARIANT"
    assert len(outbox_rows()) == 1


def publish_request_for(request: EnqueueRequest) -> EnqueueRequest:
    from dataclasses import replace

    from ultimate_jobs.core.ids import new_id

    return replace(request, id=new_id(), run_id=new_id())


# -- the relay: order, claims, leases, fences ------------------------------------------------------


def test_staged_order_is_publish_order(pg: Pg) -> None:
    with transaction.atomic():
        invoice = pg.create_invoice.enqueue({"order": "o-1"})
        charge = pg.charge_card.enqueue({"order": "o-1"})
    driver = Recording(pg.driver)
    relay = pg.relay(driver=driver, batch_size=1)  # one row a pass: order across passes too
    assert relay.run_once() == 1 and relay.run_once() == 1
    assert driver.batches == [["invoice:o-1"], ["charge:o-1"]]
    assert job_ids() == [invoice.id, charge.id]
    run_jobs(pg.driver, clock=pg.clock, batch=1)
    assert pg.ran == ["create_invoice:o-1", "charge_card:o-1"]


def test_a_failed_publish_stops_the_batch_and_releases_the_rest_at_once(pg: Pg) -> None:
    staged = pg.stage("o-1", "o-2", "o-3")
    driver = Recording(pg.driver)
    driver.refuse = {"invoice:o-2"}
    relay = pg.relay(driver=driver)
    assert relay.run_once() == 1
    assert job_ids() == [staged[0].id]
    rows = outbox_rows()
    assert [(r[0], r[2]) for r in rows] == [(staged[0].id, True), (staged[1].id, False), (staged[2].id, False)]
    assert [r[1] for r in rows[1:]] == [None, None]  # released: claimable at once
    (error,) = query("SELECT last_error FROM x_outbox WHERE id = %s", [staged[1].id])[0]
    assert "the queue is down" in error
    driver.refuse = set()
    assert relay.run_once() == 2  # no lease to wait out: the next pass takes them
    assert job_ids() == [e.id for e in staged]


def poison(row_id: str) -> None:
    """Make a committed row unpublishable by other means than its stage: a run_at no timestamp can hold
    (as an older stager without the enqueue checks, or a hand edit, could have left it)."""
    query(
        "UPDATE x_outbox SET request = jsonb_set(request, '{run_at_ms}', '100000000000000000000') "
        "WHERE id = %s RETURNING id",
        [row_id],
    )


def test_a_row_the_database_refuses_is_set_aside_and_the_rows_behind_it_publish(pg: Pg) -> None:
    staged = pg.stage("o-1", "o-2", "o-3")
    poison(staged[1].id)
    relay = pg.relay()
    assert relay.run_once() == 2
    assert job_ids() == [staged[0].id, staged[2].id]
    assert relay.stats.set_aside == 1 and relay.stats.publish_failures == 0
    (failed,) = pg.store.failed(limit=10)
    assert (failed.id, failed.name, failed.queue) == (staged[1].id, "create_invoice", "outbox")
    assert failed.error is not None and "out of range" in failed.error
    stats = pg.store.stats()
    assert (stats.pending, stats.failed, stats.oldest_pending_ms) == (0, 1, None)
    assert relay.run_once() == 0  # a set-aside row is never claimed again by itself

    # the rows behind a set-aside row keep flowing
    (later,) = pg.stage("o-4")
    assert relay.run_once() == 1 and job_ids()[-1] == later.id

    # retried unchanged, it is set aside again; fixed and retried, it publishes in its place
    assert pg.store.retry_failed([staged[1].id, "not-a-uuid"]) == {staged[1].id}
    assert relay.run_once() == 0 and pg.store.stats().failed == 1
    query("UPDATE x_outbox SET request = request - 'run_at_ms' WHERE id = %s RETURNING id", [staged[1].id])
    pg.store.retry_failed([staged[1].id])
    assert pg.store.stats().pending == 1
    assert relay.run_once() == 1
    assert staged[1].id in job_ids() and pg.store.failed(limit=10) == []


def test_a_set_aside_row_can_be_removed_and_only_a_set_aside_row(pg: Pg) -> None:
    bad, good = pg.stage("o-1", "o-2")
    poison(bad.id)
    (pending,) = pg.stage("o-3")
    relay = pg.relay(batch_size=2)
    assert relay.run_once() == 1  # o-1 set aside, o-2 published; o-3 waits for the next pass
    assert pg.store.remove_failed([bad.id, good.id, pending.id]) == {bad.id}
    assert [r[0] for r in outbox_rows()] == [good.id, pending.id]
    assert pg.store.stats().failed == 0 and pg.store.stats().pending == 1


def test_a_set_aside_row_does_not_silence_the_wake(pg: Pg, listener: psycopg.Connection[Any]) -> None:
    (bad,) = pg.stage("o-1")
    heard_before_marker(listener)
    poison(bad.id)
    pg.relay().run_once()
    pg.stage("o-2")
    assert heard_before_marker(listener) == [""]  # the set-aside row waits for no relay: wake one


def test_claim_stamps_a_lease_that_a_second_relay_cannot_take_until_it_lapses(pg: Pg) -> None:
    staged = pg.stage("o-1", "o-2")
    a = pg.store.claim(claimant="relay-a", limit=10)
    assert [r.id for r in a] == [e.id for e in staged] and a[0].claimed_at_ms == pg.clock.now_ms()
    assert [r.request.idempotency_key for r in a] == ["invoice:o-1", "invoice:o-2"]
    assert pg.store.claim(claimant="relay-b", limit=10) == []
    pg.clock.advance(LEASE_MS - 1)
    assert pg.store.claim(claimant="relay-b", limit=10) == []
    pg.clock.advance(1)
    b = pg.store.claim(claimant="relay-b", limit=10)
    assert [r.id for r in b] == [e.id for e in staged] and b[0].claimed_by != a[0].claimed_by
    assert b[0].claimed_by is not None and b[0].claimed_by.startswith("relay-b:")
    assert pg.store.backlog() == 2

    ids = [e.id for e in staged]
    stale = a[0].claimed_by
    assert stale is not None
    assert pg.store.release(ids, claimed_by=stale) == frozenset()
    assert pg.store.mark_published(ids, claimed_by=stale) == frozenset()
    assert pg.store.mark_published(["not-a-uuid"], claimed_by=stale) == frozenset()
    assert pg.store.release(ids[1:], claimed_by=b[0].claimed_by) == frozenset(ids[1:])
    assert pg.store.mark_published(ids[:1], claimed_by=b[0].claimed_by) == frozenset(ids[:1])
    assert pg.store.backlog() == 1
    assert [r[1:] for r in outbox_rows()] == [(b[0].claimed_by, True), (None, False)]


def test_a_relay_that_stalls_past_its_lease_cannot_release_or_retire_reclaimed_rows(pg: Pg) -> None:
    staged = pg.stage("o-1", "o-2")
    stalling = Recording(pg.driver)
    a = pg.relay(driver=stalling, relay_id="relay-a")
    b = pg.relay(relay_id="relay-b")

    def stall() -> None:  # a claimed, then stalled past its lease; b reclaimed and published meanwhile
        pg.clock.advance(LEASE_MS + 1)
        assert b.run_once() == 2

    stalling.before = stall
    assert a.run_once() == 2  # its late publish met b's jobs by id and inserted nothing
    assert (a.stats.published, a.stats.claims_lost, a.stats.deduped) == (0, 2, 2)
    assert sorted(job_ids()) == sorted(e.id for e in staged)
    assert {r[1].split(":")[0] for r in outbox_rows()} == {"relay-b"}

    # The release half: a stalls, c reclaims and is mid-publish when a's failed publish hands rows back.
    (late,) = pg.stage("o-3")
    stalling.refuse = {"invoice:o-3"}
    held: list[str | None] = []

    def reclaim() -> None:
        pg.clock.advance(LEASE_MS + 1)
        held.extend(r.claimed_by for r in pg.store.claim(claimant="relay-c", limit=10))

    stalling.before = reclaim
    assert a.run_once() == 0
    assert query("SELECT claimed_by FROM x_outbox WHERE id = %s", [late.id]) == [(held[0],)]  # still c's
    assert pg.store.claim(claimant="relay-d", limit=10) == []


def test_a_republish_after_the_first_job_finished_runs_nothing_again(pg: Pg) -> None:
    (staged,) = pg.stage("o-1")
    relay = pg.relay()
    assert relay.run_once() == 1
    run_jobs(pg.driver, clock=pg.clock)
    assert pg.ran == ["create_invoice:o-1"]
    assert query("SELECT state FROM x_jobs WHERE id = %s", [staged.id]) == [("done",)]

    # A relay that died between its publish and its mark leaves the row unpublished: it goes out again.
    query("UPDATE x_outbox SET published_at = NULL, claimed_at = NULL, claimed_by = NULL RETURNING id")
    assert relay.run_once() == 1 and relay.stats.deduped == 1
    assert query("SELECT id::text, state FROM x_jobs") == [(staged.id, "done")]
    run_jobs(pg.driver, clock=pg.clock)
    assert pg.ran == ["create_invoice:o-1"]


def test_a_postgres_outbox_publishes_onto_any_driver(pg: Pg) -> None:
    staged = pg.stage("o-1", "o-2")
    memory = MemoryDriver(clock=pg.clock)
    relay = outbox_relay(store=pg.store, driver=memory, clock=pg.clock)
    assert relay.run_once() == 2
    assert sorted(memory.rows) == sorted(e.id for e in staged)
    assert job_ids() == [] and pg.store.backlog() == 0


# -- the statements --------------------------------------------------------------------------------


def test_every_outbox_statement_runs_against_the_migrated_schema(pg: Pg) -> None:
    ran: set[str] = set()
    inner = django_executor("default")

    class Recorder:
        alias = "default"

        def query(self, sql: str, params: Any = None, *, binding: Binding = "django") -> list[tuple[Any, ...]]:
            ran.add(sql)
            return inner.query(sql, params, binding=binding)

    store = postgres_outbox_store(Recorder(), Recorder(), clock=pg.clock)
    request = publish_request_for(pg.create_invoice.build_request({"order": "o-1"}))
    store.stage([request])
    (record,) = store.claim(claimant="r", limit=5)
    assert publish_request(record).id == request.id
    assert record.claimed_by is not None
    store.release([record.id], claimed_by=record.claimed_by, error="x")
    (record,) = store.claim(claimant="r", limit=5)
    assert record.claimed_by is not None
    store.mark_published([record.id], claimed_by=record.claimed_by)
    assert store.backlog() == 0
    assert store.purge_published(before_ms=pg.clock.now_ms() + 1, limit=5) == 1
    (request,) = [publish_request_for(pg.create_invoice.build_request({"order": "o-2"}))]
    store.stage([request])
    (record,) = store.claim(claimant="r", limit=5)
    assert record.claimed_by is not None
    assert store.set_aside([record.id], claimed_by=record.claimed_by, error="bad") == {record.id}
    assert store.stats().failed == 1 and [f.id for f in store.failed(limit=5)] == [record.id]
    assert store.retry_failed([record.id]) == {record.id}
    (record,) = store.claim(claimant="r", limit=5)
    assert record.claimed_by is not None
    store.set_aside([record.id], claimed_by=record.claimed_by, error="bad")
    assert store.remove_failed([record.id]) == {record.id}
    Recorder().query(outbox_sql.SQL_OUTBOX_WAKE_PROBE, {"payload": f"{PROBE_PREFIX}test"})
    constants = {getattr(outbox_sql, n) for n in dir(outbox_sql) if n.startswith("SQL_")}
    assert ran == constants


def test_purge_published_removes_old_published_rows_a_batch_at_a_time(pg: Pg) -> None:
    published = []
    for order in ("o-1", "o-2", "o-3"):
        pg.stage(order)
        (record,) = pg.store.claim(claimant="r", limit=5)
        assert record.claimed_by is not None
        assert pg.store.mark_published([record.id], claimed_by=record.claimed_by) == {record.id}
        published.append(record.id)
        pg.clock.advance(1_000)
    pg.stage("o-4")  # waiting: retention never touches it
    cutoff = pg.clock.now_ms() - 1_000  # the last published row is younger than the cutoff
    assert pg.store.purge_published(before_ms=cutoff, limit=1) == 1
    assert pg.store.purge_published(before_ms=cutoff, limit=1) == 1
    assert pg.store.purge_published(before_ms=cutoff, limit=1) == 0
    remaining = {row[0] for row in outbox_rows()}
    assert remaining.isdisjoint(published[:2]) and published[2] in remaining
    assert pg.store.backlog() == 1
    with pytest.raises(InvariantError):
        pg.store.purge_published(before_ms=cutoff, limit=0)


# -- the wake --------------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[psycopg.Connection[Any]]:
    """Another session, listening on x_outbox_wake."""
    with psycopg.connect(conninfo_for(connection.settings_dict), autocommit=True) as conn:
        conn.execute(f"LISTEN {OUTBOX_WAKE_CHANNEL}")
        yield conn


def heard_before_marker(listener: psycopg.Connection[Any]) -> list[str]:
    """The payloads delivered before a marker notified now (notifications arrive in commit order)."""
    query(f"SELECT pg_notify('{OUTBOX_WAKE_CHANNEL}', 'marker')")
    heard: list[str] = []
    for note in listener.notifies(timeout=WAIT):
        if note.payload == "marker":
            return heard
        heard.append(note.payload)
    raise AssertionError(f"the marker never arrived; heard {heard}")


def test_staging_announces_on_commit_only_and_only_when_no_committed_row_waits(
    pg: Pg, listener: psycopg.Connection[Any]
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        pg.create_invoice.enqueue({"order": "rolled-back"})
        raise RuntimeError("rollback")
    assert heard_before_marker(listener) == []  # a rollback announces nothing

    with transaction.atomic():
        pg.create_invoice.enqueue({"order": "o-1"})
        pg.create_invoice.enqueue({"order": "o-2"})
    assert heard_before_marker(listener) == [""]  # one wake for the commit, payload empty

    pg.stage("o-3")
    assert heard_before_marker(listener) == []  # o-1 is waiting unclaimed: the relay it woke finds o-3

    pg.store.claim(claimant="relay-a", limit=10)
    pg.stage("o-4")
    assert heard_before_marker(listener) == [""]  # nothing waits unclaimed any more: wake the relay


def test_a_committed_stage_in_another_session_wakes_the_relay(pg: Pg) -> None:
    relay = pg.relay(interval="30s", idle_poll_max="60s")  # no poll inside this test: only the wake
    relay.start()
    try:
        eventually(lambda: pg.store.wake_is_live() and relay.stats.passes >= 1, timeout=WAIT)
        assert relay.idle_ceiling_ms() == 60_000
        (staged,) = pg.stage("o-1")
        eventually(lambda: job_ids() == [staged.id], timeout=WAIT)
    finally:
        assert relay.stop() is True
    assert pg.store.wake_is_live() is False  # the last subscriber left: the session is closed


def test_relay_threads_publish_concurrently_exactly_once(pg: Pg) -> None:
    staged: list[Enqueued] = []
    for start in range(0, 200, 50):
        with transaction.atomic():
            staged += pg.router.enqueue_many(
                [pg.create_invoice.build_request({"order": f"o-{i:03d}"}) for i in range(start, start + 50)]
            )
    relays = [pg.relay(relay_id=f"relay-{n}", batch_size=7) for n in range(3)]
    errors: list[BaseException] = []

    def drain(relay: OutboxRelay) -> None:
        try:
            while relay.run_once():
                pass
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=drain, args=(r,)) for r in relays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 4)
    assert errors == []
    assert pg.store.backlog() == 0
    assert sorted(job_ids()) == sorted(e.id for e in staged)
    assert sum(r.stats.published for r in relays) == 200 and sum(r.stats.deduped for r in relays) == 0
