"""The outbox on the memory store and driver, driven by a frozen clock: the store's claim, lease and
fences; the router's modes and ids; the relay's order, failure handling, re-publish, lease loss, stop
and wake. The Postgres store runs the same semantics in tests/postgres/test_outbox_postgres.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from tests.conftest import JobsEnv
from tests.helpers import eventually
from ultimate_jobs import JobRun, job
from ultimate_jobs.contracts.jobs import Enqueued, EnqueueRequest
from ultimate_jobs.contracts.outbox import check_claim_lease, publish_request, request_from_json, request_to_json
from ultimate_jobs.core.routing import DirectRouter, jobs_router, set_jobs_router
from ultimate_jobs.errors import (
    DriverUnavailableError,
    InvariantError,
    OutboxNoTxError,
    UltimateError,
    ValidationError,
)
from ultimate_jobs.outbox import (
    DEFAULT_CLAIM_LEASE_MS,
    MemoryOutboxStore,
    OutboxRelay,
    OutboxRouter,
    install_outbox,
    memory_outbox_store,
    outbox_relay,
    postgres_outbox_store,
    relay_from_settings,
    uninstall_outbox,
)
from ultimate_jobs.outbox import boot as outbox_boot
from ultimate_jobs.outbox.relay import is_permanent
from ultimate_jobs.testing import run_jobs
from ultimate_jobs.worker import IDLE_POLL_CEILING_MS, WOKEN_IDLE_POLL_CEILING_MS

WAIT = 5.0  # the bound on every cross-thread wait; a passing test never spends it


class Tx:
    """A stand-in for "the caller holds a transaction on the jobs database"."""

    def __init__(self) -> None:
        self.open = False

    def __call__(self) -> bool:
        return self.open


class Outbox:
    """A memory store, its "transaction" switch, a router over the test's memory driver, and its jobs."""

    def __init__(self, env: JobsEnv, *, mode: Any = "optional") -> None:
        self.env = env
        self.tx = Tx()
        self.store = memory_outbox_store(clock=env.clock, current_tx=self.tx)
        self.router = OutboxRouter(store=self.store, driver=env.driver, mode=mode)
        self.ran: list[str] = []

        @job(idempotency_key=lambda i: f"invoice:{i['order']}", tenant="none", queue="outbox")
        def create_invoice(run: JobRun[Any]) -> None:
            self.ran.append(f"create_invoice:{run.input['order']}")

        @job(idempotency_key=lambda i: f"charge:{i['order']}", tenant="none", queue="outbox")
        def charge_card(run: JobRun[Any]) -> None:
            self.ran.append(f"charge_card:{run.input['order']}")

        self.create_invoice = create_invoice
        self.charge_card = charge_card

    def request(self, order: str = "o-1", **options: Any) -> EnqueueRequest:
        return self.create_invoice.build_request({"order": order}, **options)

    def relay(self, *, driver: Any = None, **options: Any) -> OutboxRelay:
        options.setdefault("relay_id", "relay-a")
        return outbox_relay(store=self.store, driver=driver or self.env.driver, clock=self.env.clock, **options)

    def staged(self, *orders: str) -> list[Enqueued]:
        self.tx.open = True
        try:
            return [self.router.enqueue(self.request(o)) for o in orders]
        finally:
            self.tx.open = False

    def job_ids(self) -> list[str]:
        return sorted(self.env.driver.rows)


@pytest.fixture
def outbox(jobs: JobsEnv) -> Iterator[Outbox]:
    box = Outbox(jobs)
    try:
        yield box
    finally:
        set_jobs_router(None)


class FlakyDriver:
    """The memory driver, refusing any batch that holds a request named in ``refuse`` (by job name and
    input key), and recording every batch it was handed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = "flaky"
        self.refuse: set[str] = set()  # a transient error
        self.invalid: set[str] = set()  # a permanent one (X_VALIDATION, classified terminal)
        self.batches: list[list[str]] = []
        self.before: Callable[[], None] | None = None

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        if self.before is not None:
            hook, self.before = self.before, None
            hook()
        self.batches.append([r.idempotency_key for r in requests])
        refused = [r.idempotency_key for r in requests if r.idempotency_key in self.refuse]
        if refused:
            raise ConnectionError(f"the queue refused {refused[0]}")
        invalid = [r.idempotency_key for r in requests if r.idempotency_key in self.invalid]
        if invalid:
            raise ValidationError(f"{invalid[0]} can never be stored", {})
        answers: list[Enqueued] = self.inner.enqueue_many(requests)
        return answers

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


# -- the store -------------------------------------------------------------------------------------


def test_claim_lease_must_be_a_positive_whole_number_of_ms_at_construction(jobs: JobsEnv) -> None:
    for bad in (0, -1, 1.5, 30_000.0, "30s", True, None):
        with pytest.raises(InvariantError) as caught:
            memory_outbox_store(claim_lease_ms=bad)  # type: ignore[arg-type]
        assert caught.value.code == "X_INVARIANT"
        with pytest.raises(InvariantError):
            postgres_outbox_store(claim_lease_ms=bad)  # type: ignore[arg-type]
    assert memory_outbox_store().claim_lease_ms == DEFAULT_CLAIM_LEASE_MS == 30_000
    assert check_claim_lease(1) == 1


def test_a_staged_request_must_carry_its_ids_and_own_them(outbox: Outbox) -> None:
    with pytest.raises(InvariantError, match="must carry id and run_id"):
        outbox.store.stage([outbox.request()])
    request = outbox.request(id="0190b0c0-0000-7000-8000-000000000001", run_id="0190b0c0-0000-7000-8000-00000000000a")
    outbox.store.stage([request])
    with pytest.raises(InvariantError, match="already staged") as caught:
        outbox.store.stage([request])
    assert caught.value.code == "X_INVARIANT"
    assert len(outbox.store.retained()) == 1


def test_claim_is_a_lease_in_staged_order_and_a_lapsed_one_is_taken_again(outbox: Outbox) -> None:
    first = outbox.staged("o-1", "o-2")
    outbox.env.clock.advance(1)
    later = outbox.staged("o-3")
    store = outbox.store
    a = store.claim(claimant="relay-a", limit=2)
    assert [r.id for r in a] == [e.id for e in first]
    assert {r.claimed_by for r in a} == {a[0].claimed_by} and a[0].claimed_by.startswith("relay-a:")
    assert [r.run_id for r in a] == [e.run_id for e in first]
    b = store.claim(claimant="relay-b", limit=10)  # a's rows are held for the lease: b gets the rest only
    assert [r.id for r in b] == [later[0].id]
    assert store.claim(claimant="relay-c", limit=10) == []

    outbox.env.clock.advance(DEFAULT_CLAIM_LEASE_MS)  # a died mid-batch: its rows wait out the lease
    c = store.claim(claimant="relay-c", limit=10)
    assert [r.id for r in c] == [*(e.id for e in first), later[0].id]
    assert c[0].claimed_by != a[0].claimed_by
    with pytest.raises(InvariantError):
        store.claim(claimant="relay-c", limit=0)


def test_release_and_mark_published_are_fenced_on_the_claimant(outbox: Outbox) -> None:
    staged = outbox.staged("o-1", "o-2")
    ids = [e.id for e in staged]
    store = outbox.store
    stale = store.claim(claimant="relay-a", limit=10)[0].claimed_by
    assert stale is not None
    outbox.env.clock.advance(DEFAULT_CLAIM_LEASE_MS)
    fresh = store.claim(claimant="relay-b", limit=10)[0].claimed_by
    assert fresh is not None

    assert store.release(ids, claimed_by=stale) == frozenset()  # the lapsed claimant owns nothing
    assert store.mark_published(ids, claimed_by=stale) == frozenset()
    assert store.claim(claimant="relay-c", limit=10) == []  # still b's
    assert store.release(ids[1:], claimed_by=fresh, error="boom") == frozenset(ids[1:])
    assert store.last_error(ids[1]) == "boom"
    assert store.mark_published(ids[:1], claimed_by=fresh) == frozenset(ids[:1])
    assert [r.id for r in store.retained()] == ids[1:]  # published rows are dropped; retained is the backlog
    assert store.backlog() == 1


def test_a_request_round_trips_through_json() -> None:
    request = EnqueueRequest(
        name="n", queue="q", input={"a": [1, {"b": None}]}, idempotency_key="k", tenant_id="org", max_attempts=3,
        priority=2, run_at_ms=5, id="i", run_id="r", enqueued_by="u", concurrency_key="c",
    )  # fmt: skip
    assert request_from_json({**request_to_json(request), "from_a_newer_version": 1}) == request


# -- the router ------------------------------------------------------------------------------------


def test_optional_stages_inside_a_transaction_and_publishes_directly_outside(outbox: Outbox) -> None:
    set_jobs_router(outbox.router)
    direct = outbox.create_invoice.enqueue({"order": "o-direct"})
    assert direct.id in outbox.env.driver.rows and outbox.store.retained() == []

    outbox.tx.open = True
    staged = outbox.create_invoice.enqueue({"order": "o-staged"})
    outbox.tx.open = False
    assert staged.deduped is False and staged.id and staged.run_id
    assert staged.id not in outbox.env.driver.rows
    (row,) = outbox.store.retained()
    assert (row.id, row.run_id) == (staged.id, staged.run_id)  # the row id IS the job id
    assert (row.request.id, row.request.run_id) == (staged.id, staged.run_id)

    outbox.relay().run_once()
    record = outbox.env.driver.rows[staged.id]
    assert (record.id, record.run_id) == (staged.id, staged.run_id)


def test_required_refuses_an_enqueue_outside_a_transaction(jobs: JobsEnv) -> None:
    box = Outbox(jobs, mode="required")
    set_jobs_router(box.router)
    try:
        with pytest.raises(OutboxNoTxError) as caught:
            box.create_invoice.enqueue({"order": "o-1"})
        assert caught.value.code == "X_OUTBOX_NO_TX"
        assert jobs.driver.rows == {} and box.store.retained() == []
        box.tx.open = True
        assert box.charge_card.enqueue({"order": "o-1"}).id == box.store.retained()[0].id
    finally:
        set_jobs_router(None)


def test_off_always_publishes_directly(jobs: JobsEnv) -> None:
    box = Outbox(jobs, mode="off")
    box.tx.open = True
    answer = box.router.enqueue(box.request())
    assert answer.id in jobs.driver.rows and box.store.retained() == []


def test_a_bad_mode_and_a_staged_on_conflict_error_are_refused(outbox: Outbox) -> None:
    with pytest.raises(InvariantError) as caught:
        OutboxRouter(store=outbox.store, mode="sometimes")  # type: ignore[arg-type]
    assert caught.value.code == "X_INVARIANT"
    outbox.tx.open = True
    with pytest.raises(InvariantError, match="on_conflict='error' cannot be answered inside a transaction"):
        outbox.router.enqueue(outbox.request(on_conflict="error"))
    assert outbox.store.retained() == []


def test_enqueue_many_stages_in_one_call_and_keeps_the_order(outbox: Outbox) -> None:
    outbox.tx.open = True
    answers = outbox.router.enqueue_many([outbox.request(f"o-{i}") for i in range(5)])
    assert outbox.router.enqueue_many([]) == []
    assert [r.id for r in outbox.store.retained()] == [a.id for a in answers]
    assert len({a.id for a in answers}) == 5


def test_a_staged_enqueue_that_a_live_job_holds_the_key_of_is_deduped_by_the_publish(outbox: Outbox) -> None:
    live = outbox.router.enqueue(outbox.request("o-1"))  # outside the transaction: published at once
    (staged,) = outbox.staged("o-1")
    assert staged.deduped is False  # only the publish can tell
    outbox.relay().run_once()
    assert outbox.job_ids() == [live.id]  # the staged ids name no row
    assert outbox.store.retained() == []


def test_enqueue_as_goes_through_the_router(outbox: Outbox) -> None:
    from ultimate_jobs import Actor

    set_jobs_router(outbox.router)
    outbox.tx.open = True
    answer = outbox.create_invoice.enqueue_as(Actor(id="user-1", org_id=None), {"order": "o-1"})
    assert outbox.store.retained()[0].request.enqueued_by == "user-1"
    assert answer.id == outbox.store.retained()[0].id


# -- install ---------------------------------------------------------------------------------------


def test_install_outbox_follows_the_mode_and_uninstalls(outbox: Outbox, settings: Any) -> None:
    assert isinstance(jobs_router(), DirectRouter)
    assert install_outbox(store=outbox.store) is None  # OUTBOX unset is "off"
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "OUTBOX": "optional"}
    router = install_outbox(store=outbox.store, driver=outbox.env.driver)
    assert router is not None and jobs_router() is router and router.mode == "optional"
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "OUTBOX": "required"}
    required = install_outbox(store=outbox.store)
    assert required is not None and required.mode == "required"
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "OUTBOX": "off"}
    assert install_outbox(store=outbox.store) is None
    assert isinstance(jobs_router(), DirectRouter)
    install_outbox(mode="required", store=outbox.store)
    uninstall_outbox()
    assert isinstance(jobs_router(), DirectRouter)
    with pytest.raises(InvariantError):
        install_outbox(mode="maybe", store=outbox.store)  # type: ignore[arg-type]


def test_the_outbox_needs_a_postgres_or_sqlite_jobs_database(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert outbox_boot.outbox_supported() is True  # the suite's database is PostgreSQL
    settings.ULTIMATE_JOBS = {"DRIVER": "memory", "DATABASE": "nowhere"}
    assert outbox_boot.outbox_supported() is False
    with pytest.raises(DriverUnavailableError) as caught:
        outbox_boot.build_outbox_store()
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"

    class Mysql:
        vendor = "mysql"

    class Connections:
        settings = {"default": {}}

        def __getitem__(self, alias: str) -> Mysql:
            return Mysql()

    settings.ULTIMATE_JOBS = {"DRIVER": "memory"}
    monkeypatch.setattr(outbox_boot, "connections", Connections())
    assert outbox_boot.outbox_supported() is False
    with pytest.raises(DriverUnavailableError, match="the outbox stages in PostgreSQL or SQLite"):
        outbox_boot.build_outbox_store()


def test_relay_from_settings_publishes_onto_the_configured_driver(outbox: Outbox) -> None:
    relay = relay_from_settings(store=outbox.store, batch_size=7, drain_deadline="3s")
    assert (relay.driver, relay.batch_size, relay.drain_deadline_ms) == (outbox.env.driver, 7, 3_000)
    outbox_boot.set_outbox_store(outbox.store)
    try:
        assert relay_from_settings().store is outbox.store
        leased = relay_from_settings(claim_lease="2s")
        assert leased.store is not outbox.store and leased.store.claim_lease_ms == 2_000
    finally:
        outbox_boot.set_outbox_store(None)


def test_outbox_relay_refuses_bad_options(outbox: Outbox) -> None:
    for options in (
        {"batch_size": 0},
        {"batch_size": 1_001},
        {"interval": 0},
        {"interval": "1s", "idle_poll_max": "10ms"},
    ):
        with pytest.raises(InvariantError) as caught:
            outbox.relay(**options)
        assert caught.value.code == "X_INVARIANT"
    with pytest.raises(InvariantError):
        outbox_relay(store=outbox.store, driver=None)  # type: ignore[arg-type]


# -- the relay -------------------------------------------------------------------------------------


def test_the_relay_publishes_in_stage_order_then_retires_the_rows(outbox: Outbox) -> None:
    driver = FlakyDriver(outbox.env.driver)
    outbox.tx.open = True
    invoice = outbox.router.enqueue(outbox.create_invoice.build_request({"order": "o-1"}))
    charge = outbox.router.enqueue(outbox.charge_card.build_request({"order": "o-1"}))
    outbox.tx.open = False
    relay = outbox.relay(driver=driver)
    assert relay.run_once() == 2
    assert driver.batches == [["invoice:o-1", "charge:o-1"]]
    assert outbox.store.retained() == [] and relay.stats.published == 2
    run_jobs(outbox.env.driver, clock=outbox.env.clock, batch=1)
    assert outbox.ran == ["create_invoice:o-1", "charge_card:o-1"]
    assert sorted([invoice.id, charge.id]) == outbox.job_ids()
    assert relay.run_once() == 0  # nothing left: a pass claims nothing


def test_a_failed_publish_stops_the_batch_and_hands_the_rest_back_at_once(
    outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    driver = FlakyDriver(outbox.env.driver)
    staged = outbox.staged("o-1", "o-2", "o-3", "o-4")
    driver.refuse = {"invoice:o-2"}
    relay = outbox.relay(driver=driver)
    with caplog.at_level(logging.WARNING, logger="ultimate_jobs"):
        assert relay.run_once() == 1  # o-1 went out; o-2 failed; o-3 and o-4 must not overtake it
    assert outbox.job_ids() == [staged[0].id]
    retained = outbox.store.retained()
    assert [r.id for r in retained] == [e.id for e in staged[1:]]
    assert all(r.claimed_by is None for r in retained)  # released at once, not after a lease
    assert "refused invoice:o-2" in (outbox.store.last_error(staged[1].id) or "")
    (failed,) = [r for r in caplog.records if r.getMessage() == "jobs.outbox.publish-failed"]
    assert failed.jobs["id"] == staged[1].id and failed.jobs["released"] == 3  # type: ignore[attr-defined]

    driver.refuse = set()
    assert relay.run_once() == 3  # the next pass, one poll interval later, carries on in order
    assert driver.batches[-1] == ["invoice:o-2", "invoice:o-3", "invoice:o-4"]
    assert outbox.job_ids() == sorted(e.id for e in staged)
    assert relay.stats.publish_failures == 1 and relay.stats.released == 3


def test_a_permanent_publish_error_sets_the_row_aside_and_the_rows_behind_it_publish(
    outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    driver = FlakyDriver(outbox.env.driver)
    staged = outbox.staged("o-1", "o-2", "o-3")
    driver.invalid = {"invoice:o-2"}
    relay = outbox.relay(driver=driver)
    with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
        assert relay.run_once() == 2
    assert outbox.job_ids() == sorted([staged[0].id, staged[2].id])
    (failed,) = outbox.store.failed(limit=5)
    assert failed.id == staged[1].id and "can never be stored" in (failed.error or "")
    (logged,) = [r for r in caplog.records if r.getMessage() == "jobs.outbox.row-set-aside"]
    assert logged.jobs["id"] == staged[1].id  # type: ignore[attr-defined]
    assert (outbox.store.stats().pending, outbox.store.stats().failed) == (0, 1)
    assert relay.stats.set_aside == 1 and relay.stats.publish_failures == 0
    assert relay.run_once() == 0

    driver.invalid = set()
    assert outbox.store.retry_failed([staged[1].id]) == {staged[1].id}
    assert relay.run_once() == 1 and outbox.store.failed(limit=5) == []
    assert outbox.job_ids() == sorted(e.id for e in staged)


def test_only_a_set_aside_row_is_retried_or_removed(outbox: Outbox) -> None:
    driver = FlakyDriver(outbox.env.driver)
    bad, pending = outbox.staged("o-1", "o-2")
    driver.invalid = {"invoice:o-1"}
    outbox.relay(driver=driver, batch_size=1).run_once()
    assert outbox.store.retry_failed([pending.id]) == frozenset()
    assert outbox.store.remove_failed([pending.id, bad.id]) == {bad.id}
    assert [r.id for r in outbox.store.retained()] == [pending.id]


@pytest.mark.parametrize(
    ("error", "permanent"),
    [
        (ValidationError("bad", {}), True),
        (ValueError("timestamp out of range"), True),
        (RecursionError(), True),
        (DriverUnavailableError("the database is away", {}), False),
        (ConnectionError("reset"), False),
        (OSError("timeout"), False),
    ],
)
def test_what_counts_as_a_permanent_publish_error(error: BaseException, permanent: bool) -> None:
    assert is_permanent(error) is permanent


def test_a_publish_under_an_id_that_names_a_finished_job_inserts_nothing(outbox: Outbox) -> None:
    (staged,) = outbox.staged("o-1")
    record = outbox.store.claim(claimant="relay-dead", limit=1)[0]
    outbox.env.driver.enqueue_many([publish_request(record)])  # a relay published, then died before marking
    run_jobs(outbox.env.driver, clock=outbox.env.clock)
    assert outbox.ran == ["create_invoice:o-1"]
    assert outbox.env.driver.rows[staged.id].state == "done"

    outbox.env.clock.advance(DEFAULT_CLAIM_LEASE_MS)  # its lease lapses; the next relay publishes again
    relay = outbox.relay()
    assert relay.run_once() == 1
    assert relay.stats.deduped == 1
    run_jobs(outbox.env.driver, clock=outbox.env.clock)
    assert outbox.ran == ["create_invoice:o-1"]  # nothing ran again
    assert outbox.job_ids() == [staged.id] and outbox.store.retained() == []


def test_a_relay_that_stalls_past_its_lease_cannot_retire_rows_another_relay_reclaimed(
    outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    staged = outbox.staged("o-1", "o-2")
    stalling = FlakyDriver(outbox.env.driver)
    a = outbox.relay(driver=stalling, relay_id="relay-a")
    b = outbox.relay(relay_id="relay-b")

    def stall() -> None:  # a claimed, then stalled past its lease; b reclaims and publishes meanwhile
        outbox.env.clock.advance(DEFAULT_CLAIM_LEASE_MS + 1)
        assert b.run_once() == 2

    stalling.before = stall
    with caplog.at_level(logging.WARNING, logger="ultimate_jobs"):
        assert a.run_once() == 2  # its publish met b's jobs (same ids) and inserted nothing
    assert a.stats.published == 0 and a.stats.claims_lost == 2 and a.stats.deduped == 2
    assert b.stats.published == 2
    assert outbox.job_ids() == sorted(e.id for e in staged)
    assert any(r.getMessage() == "jobs.outbox.claim-lost" for r in caplog.records)


def test_a_stalled_relays_late_release_cannot_unclaim_rows_another_relay_holds(outbox: Outbox) -> None:
    staged = outbox.staged("o-1")
    stalling = FlakyDriver(outbox.env.driver)
    stalling.refuse = {"invoice:o-1"}
    a = outbox.relay(driver=stalling, relay_id="relay-a")
    held: list[str | None] = []

    def stall() -> None:  # b reclaims after a's lease lapsed and is mid-publish when a's release lands
        outbox.env.clock.advance(DEFAULT_CLAIM_LEASE_MS + 1)
        held.extend(r.claimed_by for r in outbox.store.claim(claimant="relay-b", limit=10))

    stalling.before = stall
    assert a.run_once() == 0
    assert a.stats.released == 0 and a.stats.claims_lost == 1
    (row,) = outbox.store.retained()
    assert row.id == staged[0].id and row.claimed_by == held[0]  # still b's
    assert outbox.store.claim(claimant="relay-c", limit=10) == []  # so a third relay cannot republish it


def test_a_pass_that_throws_is_logged_and_the_loop_re_arms(outbox: Outbox, caplog: pytest.LogCaptureFixture) -> None:
    failures = 0
    real_claim = outbox.store.claim

    def claim(**kwargs: Any) -> Any:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise ConnectionError("the store is down")
        return real_claim(**kwargs)

    outbox.store.claim = claim  # type: ignore[method-assign]
    (staged,) = outbox.staged("o-1")
    relay = outbox.relay(interval="5ms", idle_poll_max="10ms")
    with caplog.at_level(logging.ERROR, logger="ultimate_jobs"):
        relay.start()
        try:
            eventually(lambda: staged.id in outbox.env.driver.rows, timeout=WAIT)
        finally:
            assert relay.stop() is True
    ticks = [r for r in caplog.records if r.getMessage() == "jobs.outbox.relay.pass-failed"]
    assert len(ticks) == 2 and relay.stats.pass_failures == 2
    assert relay.state == "stopped"


def test_a_stage_wakes_the_relay_without_waiting_for_the_poll(outbox: Outbox, monkeypatch: pytest.MonkeyPatch) -> None:
    unsubscribed: list[bool] = []
    subscribe = outbox.store.subscribe

    def subscribe_and_note_the_unsubscribe(listener: Any) -> Callable[[], None]:
        unsubscribe = subscribe(listener)

        def noted() -> None:
            unsubscribed.append(True)
            unsubscribe()

        return noted

    monkeypatch.setattr(outbox.store, "subscribe", subscribe_and_note_the_unsubscribe)
    relay = outbox.relay(interval="1s", idle_poll_max="60s")
    relay.start()
    try:
        eventually(lambda: relay.stats.passes >= 1, timeout=WAIT)  # the first pass found nothing
        (staged,) = outbox.staged("o-1")  # the memory store's stage is its whole wake
        eventually(lambda: staged.id in outbox.env.driver.rows, timeout=WAIT)
    finally:
        relay.stop()
    assert unsubscribed == [True]  # stop() unsubscribed


class ScriptedWake(threading.Event):
    """Stands in for the loop's wake event: records each wait (ms), answers ``woken`` by index (a kick
    arrived during that wait), and stops the loop after ``passes`` waits. No time passes."""

    def __init__(self, relay: OutboxRelay, passes: int, woken: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.relay, self.passes, self.woken = relay, passes, woken
        self.waits: list[int] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(round(timeout * 1000))
        if len(self.waits) >= self.passes:
            self.relay.accept()
        return len(self.waits) - 1 in self.woken


def test_an_idle_relay_backs_off_doubling_to_the_ceiling_and_a_wake_resets_it(outbox: Outbox) -> None:
    outbox.staged("o-1")
    relay = outbox.relay(interval="200ms")
    wake = ScriptedWake(relay, passes=9, woken=frozenset({5}))
    # Private, and the only way: the loop's waits are real Event waits, so reading their lengths without
    # sleeping through them means scripting the loop's own event and running the loop on this thread.
    relay._wake = wake
    relay._loop()  # on this thread, until the scripted wake stops it
    # busy (the staged row), then idle doubling to 2 s; woken during the 6th wait: pass now, floor again
    assert wake.waits == [200, 400, 800, 1_600, 2_000, 2_000, 400, 800, 1_600]
    assert relay.stats.passes == 9 and relay.stats.published == 1


def test_a_full_batch_passes_again_at_once(outbox: Outbox) -> None:
    outbox.staged("o-1", "o-2", "o-3")
    relay = outbox.relay(interval="200ms", batch_size=1)
    wake = ScriptedWake(relay, passes=1)
    relay._wake = wake  # private, as above: the waits are read off the loop's own event
    relay._loop()
    assert relay.stats.passes == 4 and relay.stats.published == 3  # three full batches, no wait between
    assert wake.waits == [400]  # the fourth pass found nothing: idle


def test_the_idle_ceiling_follows_the_stores_wake(outbox: Outbox) -> None:
    relay = outbox.relay()
    assert relay.idle_ceiling_ms() == IDLE_POLL_CEILING_MS  # the memory store proves no wake
    live = {"value": True}
    outbox.store.wake_is_live = lambda: live["value"]  # type: ignore[method-assign]
    assert relay.idle_ceiling_ms() == IDLE_POLL_CEILING_MS  # declared supports_listen=False: never asked
    outbox.store.supports_listen = True  # a store that declares a wake crossing processes
    assert relay.idle_ceiling_ms() == WOKEN_IDLE_POLL_CEILING_MS
    live["value"] = False
    assert relay.idle_ceiling_ms() == IDLE_POLL_CEILING_MS

    def broken() -> bool:
        raise ConnectionError("gone")

    outbox.store.wake_is_live = broken  # type: ignore[method-assign]
    assert relay.idle_ceiling_ms() == IDLE_POLL_CEILING_MS
    assert outbox.relay(idle_poll_max="750ms").idle_ceiling_ms() == 750


class GatedDriver(FlakyDriver):
    """Blocks every publish until ``gate`` is set, telling ``entered`` when one is waiting."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
        self.entered.set()
        assert self.gate.wait(WAIT), "the test never opened the gate"
        return super().enqueue_many(requests)


def test_stop_joins_the_pass_in_flight(outbox: Outbox) -> None:
    driver = GatedDriver(outbox.env.driver)
    (staged,) = outbox.staged("o-1")
    relay = outbox.relay(driver=driver)
    relay.start()
    assert driver.entered.wait(WAIT)
    answers: list[bool] = []
    stopper = threading.Thread(target=lambda: answers.append(relay.stop()))
    stopper.start()
    eventually(lambda: relay.state == "draining", timeout=WAIT)  # stop() accepted and is waiting
    assert answers == [] and stopper.is_alive()  # the publish is held at the gate: the pass is in flight
    driver.gate.set()
    stopper.join(WAIT)
    assert answers == [True] and relay.state == "stopped"
    assert outbox.store.retained() == []  # the pass marked its row before stop() returned
    assert staged.id in outbox.env.driver.rows
    assert relay.run_once() == 0  # a stopped relay passes no more


def test_accept_stops_polling_and_close_waits_out_the_pass(outbox: Outbox) -> None:
    outbox.staged("o-1")
    relay = outbox.relay()
    relay.accept(reason="SIGTERM")
    assert relay.state == "draining"
    assert relay.run_once() == 0  # accept: no more passes
    assert relay.close(1_000) is True and relay.state == "stopped"
    assert len(outbox.store.retained()) == 1  # the row waits for the next relay
    other = outbox.relay(relay_id="relay-b")
    assert other.drain(reason="test") is True
    with pytest.raises(InvariantError):
        other.start()


def test_the_relay_drains_with_the_other_roles_of_one_process(outbox: Outbox) -> None:
    from ultimate_jobs.runtime.lifecycle import Roles

    (staged,) = outbox.staged("o-1")
    relay = outbox.relay()
    roles = Roles([relay], drain_deadline_ms=1_000)
    relay.start()
    eventually(lambda: staged.id in outbox.env.driver.rows, timeout=WAIT)
    assert roles.drain("SIGTERM") is True
    assert relay.state == "stopped" and relay.wait_stopped(0)


def test_the_relay_is_ignorant_of_the_driver_it_publishes_to(outbox: Outbox) -> None:
    class Minimal:
        """Only what the relay may call: a driver of any backend."""

        name = "minimal"

        def __init__(self) -> None:
            self.published: list[str] = []

        def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued]:
            fresh = [r for r in requests if r.id not in self.published]
            self.published.extend(str(r.id) for r in fresh)
            return [Enqueued(str(r.id), str(r.run_id), r not in fresh) for r in requests]

    staged = outbox.staged("o-1", "o-2")
    driver = Minimal()
    relay = outbox_relay(store=outbox.store, driver=driver, clock=outbox.env.clock)  # type: ignore[arg-type]
    assert relay.run_once() == 2
    assert driver.published == [e.id for e in staged]


def test_every_error_the_outbox_raises_is_an_ultimate_error_with_a_code(outbox: Outbox) -> None:
    for make in (
        lambda: memory_outbox_store(claim_lease_ms=0),
        lambda: outbox.store.claim(claimant="x", limit=-1),
        lambda: outbox.relay(batch_size=True),
    ):
        with pytest.raises(UltimateError) as caught:
            make()
        assert caught.value.code == "X_INVARIANT"
    assert isinstance(outbox.store, MemoryOutboxStore)
