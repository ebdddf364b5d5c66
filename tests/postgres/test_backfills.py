"""``backfill()`` end to end on the memory and the Postgres driver: keyset pages as steps, the ledger row,
skip and force, a resumed pass, the declaration refusals, stall detection and the throttle's cancel.

The rows swept are ``tests.secapp.Post`` rows; attempts run in-process through ``run_jobs`` (the
executor a worker uses). Both drivers run on committed rows (``transactional_db``) so the throttle test's
timer thread and the pass see the same data.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import AnyJobsEnv, installed
from tests.secapp.models import Bucket, Item, Post
from ultimate_jobs import operator
from ultimate_jobs.core.declare import job
from ultimate_jobs.core.execute import AttemptEnv, execute_job
from ultimate_jobs.core.scope import current_tenant
from ultimate_jobs.core.signals import CancelSignal
from ultimate_jobs.drivers.memory import MemoryDriver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.features.backfills import (
    backfill,
    definition_checksum,
    is_backfill,
    pending_backfills,
    registered_backfills,
)
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("own_backfills")]

FAST = 1_000  # batches per second: no page waits in these tests unless one says so


@pytest.fixture(params=["memory", "postgres"])
def sweep(request: pytest.FixtureRequest) -> Iterator[AnyJobsEnv]:
    """A frozen clock and the memory or the Postgres driver installed process-wide."""
    clock = FrozenClock()
    driver: MemoryDriver | PostgresDriver = MemoryDriver(clock=clock)
    if request.param == "postgres":
        driver = PostgresDriver(clock=clock)
    with installed(clock, driver) as env:
        yield env


def posts(n: int) -> list[int]:
    """``n`` fresh posts with blank slugs; answers their primary keys in order."""
    Post.objects.bulk_create(Post(title=f"Post {i}") for i in range(n))
    return list(Post.objects.order_by("pk").values_list("pk", flat=True))


def slugify(rows: list[Post], signal: CancelSignal) -> None:
    for post in rows:
        post.slug = post.title.lower().replace(" ", "-")
    Post.objects.bulk_update(rows, ["slug"])


def outputs(env: AnyJobsEnv, job_id: str) -> dict[str, Any]:
    operator_store = env.driver.operator
    assert operator_store is not None
    return {s.name: s.output for s in operator_store.steps(job_id)}


def test_a_pass_sweeps_page_by_page_into_one_completed_ledger_row(sweep: AnyJobsEnv) -> None:
    pks = posts(2_500)
    rewrite = backfill(name="rewrite-slugs", tenant="none", batch=1_000, rate=FAST,
                       source=lambda ctx: Post.objects.all(), handle=slugify)  # fmt: skip
    enqueued = rewrite.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.outcomes["completed"] == 1
    assert report.executions[-1].result == {"name": "rewrite-slugs", "batches": 3, "rows": 2_500, "skipped": False}
    assert not Post.objects.filter(slug="").exists()
    # one step per page, its output the cursor and the counts — never the rows
    assert outputs(sweep, enqueued.id) == {
        "batch:0": {"cursor": pks[999], "rows": 1_000, "total": 1_000},
        "batch:1": {"cursor": pks[1_999], "rows": 1_000, "total": 2_000},
        "batch:2": {"cursor": pks[-1], "rows": 500, "total": 2_500},
    }
    (row,) = operator.inspect_backfills()
    assert row.declared
    assert (row.run.name, row.run.status) == ("rewrite-slugs", "completed")
    assert (row.run.rows_processed, row.run.batches) == (2_500, 3)
    assert (row.run.run_id, row.run.job_id, row.run.last_cursor) == (enqueued.run_id, enqueued.id, pks[-1])
    assert row.run.checksum == registered_backfills()[0].checksum
    assert row.as_dict()["status"] == "completed"


def test_a_re_run_answers_skipped_and_force_sweeps_into_a_new_row(sweep: AnyJobsEnv) -> None:
    posts(30)
    seen: list[int] = []
    rewrite = backfill(name="rewrite-slugs", tenant="none", batch=10, rate=FAST,
                       source=lambda ctx: Post.objects.all(),
                       handle=lambda rows, signal: seen.extend(p.pk for p in rows))  # fmt: skip
    first = rewrite.enqueue()
    run_jobs(sweep.driver, clock=sweep.clock)
    again = rewrite.enqueue()
    assert not again.deduped and again.id != first.id  # the pass is the no-op, never the enqueue
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.executions[-1].result == {
        "name": "rewrite-slugs", "batches": 0, "rows": 0, "skipped": True, "previous_run_id": first.run_id,
    }  # fmt: skip
    assert len(seen) == 30
    forced = rewrite.enqueue({"force": True})
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.executions[-1].result["rows"] == 30 and len(seen) == 60
    rows = operator.inspect_backfills(name="rewrite-slugs")
    assert [(r.run.run_id, r.run.status) for r in rows] == [(forced.run_id, "completed"), (first.run_id, "completed")]


def test_an_interrupted_pass_resumes_on_the_page_it_stopped_at(sweep: AnyJobsEnv) -> None:
    pks = posts(50)
    pages: list[list[int]] = []
    failed = {"once": False}

    def handle(rows: list[Post], signal: CancelSignal) -> None:
        pages.append([p.pk for p in rows])
        if len(pages) == 3 and not failed["once"]:
            failed["once"] = True
            raise RuntimeError("the database blinked on page 2")

    rewrite = backfill(name="resumable", tenant="none", batch=10, rate=FAST, retry={"attempts": 3},
                       source=lambda ctx: Post.objects.all(), handle=handle)  # fmt: skip
    enqueued = rewrite.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.outcomes["retried"] == 1 and report.outcomes["completed"] == 1
    # pages 0 and 1 replayed from their steps; page 2 read again from its cursor, then on to the end
    assert pages == [pks[0:10], pks[10:20], pks[20:30], pks[20:30], pks[30:40], pks[40:50]]
    # 50 rows in pages of 10: the sixth page comes back empty, which is how the pass knows it is done
    assert sorted(outputs(sweep, enqueued.id)) == [f"batch:{i}" for i in range(6)]
    assert outputs(sweep, enqueued.id)["batch:5"] == {"cursor": pks[-1], "rows": 0, "total": 50}
    (row,) = operator.inspect_backfills()
    assert (row.run.status, row.run.rows_processed, row.run.batches, row.run.error_code) == ("completed", 50, 6, None)
    assert row.run.run_id == enqueued.run_id  # the retry adopted its row: one row, started when the pass began


def test_a_failed_attempt_marks_its_row_failed_until_the_retry(sweep: AnyJobsEnv) -> None:
    posts(5)

    def handle(rows: list[Post], signal: CancelSignal) -> None:
        raise RuntimeError("boom")

    broken = backfill(name="broken", tenant="none", batch=10, rate=FAST, retry={"attempts": 1},
                      source=lambda ctx: Post.objects.all(), handle=handle)  # fmt: skip
    broken.enqueue()
    run_jobs(sweep.driver, clock=sweep.clock)
    (row,) = operator.inspect_backfills(status="failed")
    assert (row.run.name, row.run.error_code) == ("broken", "RuntimeError")
    assert pending_backfills(environment="production").pending == ["broken"]


def test_stalled_when_count_still_matches_after_the_source_ran_out(sweep: AnyJobsEnv) -> None:
    posts(12)
    stalled = backfill(name="stalls", tenant="none", batch=5, rate=FAST,
                       source=lambda ctx: Post.objects.filter(title__startswith="Post 1"),
                       count=lambda ctx: Post.objects.filter(slug="").count(),  # another predicate
                       handle=slugify)  # fmt: skip
    enqueued = stalled.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    last = report.last(enqueued.id)
    assert last is not None and last.outcome == "dead-lettered"  # X_BACKFILL_STALLED is terminal
    (row,) = operator.inspect_backfills()
    assert (row.run.status, row.run.error_code) == ("failed", "X_BACKFILL_STALLED")


def test_count_converged_completes_and_a_bad_count_is_an_invariant(sweep: AnyJobsEnv) -> None:
    posts(7)
    ok = backfill(name="converges", tenant="none", batch=5, rate=FAST,
                  source=lambda ctx: Post.objects.filter(slug=""),
                  count=lambda ctx: Post.objects.filter(slug="").count(), handle=slugify)  # fmt: skip
    bad = backfill(name="miscounts", tenant="none", batch=5, rate=FAST,
                   source=lambda ctx: Post.objects.none(), count=lambda ctx: -1, handle=slugify)  # fmt: skip
    ok.enqueue()
    bad.enqueue()
    run_jobs(sweep.driver, clock=sweep.clock)
    statuses = {r.run.name: (r.run.status, r.run.error_code) for r in operator.inspect_backfills()}
    assert statuses == {"converges": ("completed", None), "miscounts": ("failed", "X_INVARIANT")}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"batch": 0}, "batch"),
        ({"batch": 1.5}, "batch"),
        ({"batch": float("nan")}, "batch"),
        ({"batch": True}, "batch"),
        ({"rate": 0}, "rate"),
        ({"rate": -1}, "rate"),
        ({"rate": float("nan")}, "rate"),
        ({"rate": float("inf")}, "rate"),
        ({"rate": "5"}, "rate"),
        ({"source": "Post.objects"}, "source"),
        ({"count": 3}, "count"),
        ({"requires": "0007_add_slug"}, "requires"),
        ({"environments": []}, "environments"),
        ({"environments": "production"}, "environments"),
        ({"environments": ["prod uction"]}, "environments"),
    ],
)
def test_declaration_refusals(sweep: AnyJobsEnv, options: dict[str, Any], field: str) -> None:
    declared: dict[str, Any] = {"name": "refused", "tenant": "none", "source": lambda ctx: Post.objects.all(),
                                "handle": slugify, **options}  # fmt: skip
    with pytest.raises(UltimateError) as caught:
        backfill(**declared)
    assert (caught.value.code, caught.value.meta["field"]) == ("X_JOB_DECLARATION_INVALID", field)
    assert registered_backfills() == []


def test_a_fractional_rate_is_a_rate(sweep: AnyJobsEnv) -> None:
    handle = backfill(name="slow", tenant="none", rate=0.5, source=lambda ctx: Post.objects.all(), handle=slugify)
    assert registered_backfills()[0].rate == 0.5 and is_backfill(handle)


def test_a_source_with_its_own_order_is_refused_at_the_first_page(sweep: AnyJobsEnv) -> None:
    posts(3)
    ordered = backfill(name="ordered", tenant="none", rate=FAST,
                       source=lambda ctx: Post.objects.order_by("-title"), handle=slugify)  # fmt: skip
    enqueued = ordered.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    last = report.last(enqueued.id)
    assert last is not None and last.outcome == "dead-lettered"
    assert last.error is not None and last.error.code == "X_JOB_DECLARATION_INVALID"
    assert not Post.objects.exclude(slug="").exists()


@pytest.mark.parametrize(
    ("shape", "pk_of"),
    [
        ("flat", lambda row: row),
        ("dicts", lambda row: row["pk"]),
        ("all-fields", lambda row: row["id"]),
        ("tuples", lambda row: row[1]),
        ("named", lambda row: row.pk),
    ],
)
def test_a_values_source_pages_by_the_selected_primary_key(sweep: AnyJobsEnv, shape: str, pk_of: Any) -> None:
    """values()/values_list() rows (no model instance each) page exactly like instances, 2,500 rows in
    pages of 1,000, every row handed over once, the cursor read off the selected pk."""
    sources = {
        "flat": lambda ctx: Post.objects.values_list("pk", flat=True),
        "dicts": lambda ctx: Post.objects.values("pk", "title"),
        "all-fields": lambda ctx: Post.objects.values(),
        "tuples": lambda ctx: Post.objects.values_list("title", "pk"),
        "named": lambda ctx: Post.objects.values_list("title", "pk", named=True),
    }
    pks = posts(2_500)
    seen: list[Any] = []

    def touch(rows: list[Any], signal: CancelSignal) -> None:
        seen.extend(pk_of(row) for row in rows)
        Post.objects.filter(pk__in=[pk_of(row) for row in rows]).update(slug="touched")

    sweep_values = backfill(name=f"values-{shape}", tenant="none", batch=1_000, rate=FAST,
                            source=sources[shape], handle=touch)  # fmt: skip
    enqueued = sweep_values.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.outcomes["completed"] == 1
    assert seen == pks
    assert not Post.objects.exclude(slug="touched").exists()
    assert [out["cursor"] for out in outputs(sweep, enqueued.id).values()] == [pks[999], pks[1999], pks[-1]]


def test_a_values_source_without_the_primary_key_is_refused(sweep: AnyJobsEnv) -> None:
    posts(3)
    titles = backfill(name="titles", tenant="none", rate=FAST,
                      source=lambda ctx: Post.objects.values_list("title", flat=True), handle=slugify)  # fmt: skip
    enqueued = titles.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    last = report.last(enqueued.id)
    assert last is not None and last.outcome == "dead-lettered"
    assert last.error is not None and last.error.code == "X_JOB_DECLARATION_INVALID"
    assert "add 'pk'" in last.error.message


@pytest.mark.parametrize(("every_s", "written"), [(3600.0, [1, 11]), (0.0, list(range(1, 12)))])
def test_the_ledger_progress_is_written_on_the_first_page_then_per_interval_and_on_the_last(
    sweep: AnyJobsEnv, monkeypatch: pytest.MonkeyPatch, every_s: float, written: list[int]
) -> None:
    """Eleven pages (the last one empty): with an interval longer than the pass only the first and the
    last page write the ledger's progress; with none, every page does."""
    store = sweep.driver.backfills
    assert store is not None
    writes: list[int] = []
    real = store.progress

    def spy(row_id: str, **kw: Any) -> bool:
        writes.append(kw["batches"])
        return real(row_id, **kw)

    monkeypatch.setattr(store, "progress", spy)
    monkeypatch.setattr("ultimate_jobs.features.backfills.PROGRESS_EVERY_S", every_s)
    posts(1_000)
    paged = backfill(name="paged", tenant="none", batch=100, rate=FAST,
                     source=lambda ctx: Post.objects.values_list("pk", flat=True),
                     handle=lambda rows, signal: None)  # fmt: skip
    paged.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.outcomes["completed"] == 1
    assert writes == written
    row = operator.inspect_backfills(name="paged")[0]
    assert (row.run.rows_processed, row.run.batches, row.run.status) == (1_000, 11, "completed")


def test_environments_gate_the_pass(sweep: AnyJobsEnv, settings: Any) -> None:
    settings.ULTIMATE_JOBS = {**settings.ULTIMATE_JOBS, "ENVIRONMENT": "staging"}
    posts(3)
    prod_only = backfill(name="prod-only", tenant="none", rate=FAST, environments=["production"],
                         source=lambda ctx: Post.objects.all(), handle=slugify)  # fmt: skip
    enqueued = prod_only.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    last = report.last(enqueued.id)
    assert last is not None and last.outcome == "dead-lettered"
    assert last.error is not None and last.error.code == "X_BACKFILL_ENVIRONMENT"
    assert not Post.objects.exclude(slug="").exists()
    assert pending_backfills().rows[0].state == "excluded"


def test_tenant_none_opens_the_cross_tenant_scope(sweep: AnyJobsEnv) -> None:
    for org in ("org-1", "org-2"):
        bucket = Bucket.objects.create(org_id=org, name=f"b-{org}")
        Item.objects.create(org_id=org, bucket=bucket, secret="s", total=1)
    touched: list[str] = []
    every_org = backfill(name="every-org", tenant="none", batch=1, rate=FAST,
                         source=lambda ctx: Item.objects.all(),
                         handle=lambda rows, signal: touched.extend(i.org_id for i in rows))  # fmt: skip
    every_org.enqueue()
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.outcomes["completed"] == 1
    assert sorted(touched) == ["org-1", "org-2"]


def test_the_throttle_pause_is_cut_short_by_a_cancel(sweep: AnyJobsEnv) -> None:
    posts(30)
    signal = CancelSignal()
    handled: list[int] = []

    def handle(rows: list[Post], page_signal: CancelSignal) -> None:
        handled.append(len(rows))
        # the cancel lands while the second page waits out the pause (100 s at rate 0.01) before its read
        threading.Timer(0.2, signal.abort, args=[UltimateError("X_CANCELLED", "cancelled by an operator")]).start()

    paced = backfill(name="paced", tenant="none", batch=10, rate=0.01,
                     source=lambda ctx: Post.objects.all(), handle=handle)  # fmt: skip
    enqueued = paced.enqueue()
    (claimed,) = sweep.driver.claim(queues=["default"], limit=1, worker_id="w1").jobs
    started = time.monotonic()
    execution = execute_job(claimed, AttemptEnv(driver=sweep.driver, clock=sweep.clock), signal=signal)
    assert time.monotonic() - started < 10
    assert handled == [10]  # the second page never ran
    # the attempt's verdict is read off its signal (the cancel); what the pause raised was X_ABORTED
    assert execution.error is not None and execution.error.code == "X_CANCELLED"
    (row,) = operator.inspect_backfills()
    assert (row.run.status, row.run.error_code) == ("failed", "X_ABORTED")
    # the first page is checkpointed; the second page's step, cut short in its pause, is not: a retry
    # starts there, and replays the first without a statement or a pause
    assert outputs(sweep, enqueued.id) == {
        "batch:0": {"cursor": Post.objects.order_by("pk")[9].pk, "rows": 10, "total": 10}
    }


def test_on_postgres_a_page_s_writes_and_its_checkpoint_commit_together() -> None:
    """A page whose handle fails after writing leaves none of its writes (they were in the page's
    transaction with the checkpoint), while every earlier page's writes and checkpoints stand."""
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        pks = posts(25)
        pages: list[int] = []

        def handle(rows: list[Post], signal: CancelSignal) -> None:
            pages.append(len(pages))
            Post.objects.filter(pk__in=[p.pk for p in rows]).update(slug=f"page-{len(pages)}")
            if len(pages) == 2:
                raise RuntimeError("the second page fails after its UPDATE")

        partial = backfill(name="partial", tenant="none", batch=10, rate=FAST, retry={"attempts": 1},
                           source=lambda ctx: Post.objects.all(), handle=handle)  # fmt: skip
        enqueued = partial.enqueue()
        run_jobs(env.driver, clock=env.clock)
        slugs = dict(Post.objects.values_list("pk", "slug"))
        assert [slugs[pk] for pk in pks[:10]] == ["page-1"] * 10
        assert [slugs[pk] for pk in pks[10:]] == [""] * 15  # page 2's UPDATE rolled back with its step
        assert list(outputs(env, enqueued.id)) == ["batch:0"]


def test_registered_backfills_is_backfill_and_pending(sweep: AnyJobsEnv) -> None:
    def source(ctx: Any) -> Any:
        return Post.objects.all()

    a = backfill(name="a-sweep", tenant="none", rate=FAST, source=source, handle=slugify,
                 requires="secapp.0003_post", environments=["production", "staging"],
                 count=lambda ctx: 0)  # fmt: skip
    b = backfill(name="b-sweep", tenant="none", rate=FAST, source=source, handle=slugify)

    @job(idempotency_key=lambda i: "plain", tenant="none")
    def plain(run: Any) -> None:
        return None

    assert is_backfill(a) and is_backfill(b)
    assert not is_backfill(plain) and not is_backfill(object()) and not is_backfill([])
    assert [d.as_dict() for d in registered_backfills()] == [
        {"kind": "backfill", "name": "a-sweep", "checksum": definition_checksum(source, slugify),
         "requires": "secapp.0003_post", "environments": ["production", "staging"], "counts": True,
         "batch": 1_000, "rate": float(FAST)},
        {"kind": "backfill", "name": "b-sweep", "checksum": definition_checksum(source, slugify),
         "requires": None, "environments": None, "counts": False, "batch": 1_000, "rate": float(FAST)},
    ]  # fmt: skip
    before = pending_backfills(environment="production")
    assert before.pending == ["a-sweep", "b-sweep"] and before.orphaned == []
    assert pending_backfills(environment="dev").pending == ["b-sweep"]
    a.enqueue()
    run_jobs(sweep.driver, clock=sweep.clock)
    after = pending_backfills(environment="production")
    assert {r.name: r.state for r in after.rows} == {"a-sweep": "completed", "b-sweep": "pending"}
    assert after.pending == ["b-sweep"]
    assert after.as_dict()["rows"][0]["run"]["status"] == "completed"
    gone = pending_backfills(declarations=[], environment="production")
    assert gone.orphaned == ["a-sweep"] and gone.pending == []


def test_a_moved_checksum_warns(sweep: AnyJobsEnv, caplog: pytest.LogCaptureFixture) -> None:
    posts(3)
    first = backfill(name="moving", tenant="none", rate=FAST, source=lambda ctx: Post.objects.all(), handle=slugify)
    first.enqueue()
    run_jobs(sweep.driver, clock=sweep.clock)
    from ultimate_jobs.core import registry

    registry.unregister("moving")  # a redeploy: the same name, an edited handle

    def rewritten(rows: list[Post], signal: CancelSignal) -> None:
        slugify(rows, signal)

    second = backfill(name="moving", tenant="none", rate=FAST, source=lambda ctx: Post.objects.all(), handle=rewritten)
    second.enqueue()
    with caplog.at_level(logging.WARNING, logger="ultimate_jobs"):
        report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.executions[-1].result["skipped"] is True
    assert [r.getMessage() for r in caplog.records] == ["jobs.backfill.checksum-moved"]


def test_inspect_backfills_refuses_bad_arguments(sweep: AnyJobsEnv) -> None:
    for kwargs in ({"status": "done"}, {"limit": 0}, {"limit": 201}, {"name": ""}):
        with pytest.raises(UltimateError) as caught:
            operator.inspect_backfills(**kwargs)
        assert caught.value.code == "X_JOB_ARGUMENT_INVALID"


def test_a_tenant_scoped_backfill_sweeps_one_org_under_its_guard(sweep: AnyJobsEnv) -> None:
    for org in ("org-1", "org-2"):
        bucket = Bucket.objects.create(org_id=org, name=f"b-{org}")
        Item.objects.create(org_id=org, bucket=bucket, secret="s", total=1)
    touched: list[str] = []
    one_org = backfill(name="one-org", tenant=lambda i: i.org_id, batch=5, rate=FAST,
                       source=lambda ctx: Item.objects.filter(org_id=current_tenant()),
                       handle=lambda rows, signal: touched.extend(i.org_id for i in rows))  # fmt: skip
    enqueued = one_org.enqueue({"org_id": "org-1"})
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.outcomes["completed"] == 1 and touched == ["org-1"]
    (row,) = operator.inspect_backfills()
    assert (row.run.tenant_id, row.run.run_id) == ("org-1", enqueued.run_id)
    # another org's pass is another pass: it is not skipped by org-1's completed row
    one_org.enqueue({"org_id": "org-2"})
    report = run_jobs(sweep.driver, clock=sweep.clock)
    assert report.executions[-1].result["skipped"] is False and touched == ["org-1", "org-2"]


class NoLedgerDriver(MemoryDriver):
    """The memory driver declaring no backfill ledger."""

    @property
    def backfills(self) -> None:  # type: ignore[override]
        return None


def test_a_driver_without_a_ledger_runs_the_pass_anyway() -> None:
    clock = FrozenClock()
    with installed(clock, NoLedgerDriver(clock=clock)) as env:
        posts(25)
        rewrite = backfill(name="no-ledger", tenant="none", batch=10, rate=FAST,
                           source=lambda ctx: Post.objects.all(), handle=slugify)  # fmt: skip
        rewrite.enqueue()
        run_jobs(env.driver, clock=env.clock)
        rewrite.enqueue()
        report = run_jobs(env.driver, clock=env.clock)
        # no bookkeeping: the second run sweeps again rather than answering skipped
        assert report.executions[-1].result == {"name": "no-ledger", "batches": 3, "rows": 25, "skipped": False}
        assert not Post.objects.filter(slug="").exists()
        assert pending_backfills(environment="production").pending == ["no-ledger"]
        with pytest.raises(UltimateError) as caught:
            operator.inspect_backfills()
        assert caught.value.code == "X_NOT_IMPLEMENTED"


def test_an_attempt_that_lost_its_lease_leaves_the_row_to_the_new_owner(sweep: AnyJobsEnv) -> None:
    from ultimate_jobs.errors import LeaseLostError

    posts(30)
    signal = CancelSignal()

    def handle(rows: list[Post], page_signal: CancelSignal) -> None:
        signal.abort(LeaseLostError("the lease lapsed", {}))

    lost = backfill(name="lost", tenant="none", batch=10, rate=FAST,
                    source=lambda ctx: Post.objects.all(), handle=handle)  # fmt: skip
    lost.enqueue()
    (claimed,) = sweep.driver.claim(queues=["default"], limit=1, worker_id="w1").jobs
    execution = execute_job(claimed, AttemptEnv(driver=sweep.driver, clock=sweep.clock), signal=signal)
    assert execution.error is not None and execution.error.code == "X_JOB_LEASE_LOST"
    (row,) = operator.inspect_backfills()
    assert (row.run.status, row.run.error_code) == ("running", None)


def test_tenant_is_required_as_on_job(sweep: AnyJobsEnv) -> None:
    with pytest.raises(UltimateError) as caught:
        backfill(name="no-tenant", tenant=None, source=lambda ctx: Post.objects.all(), handle=slugify)  # type: ignore[arg-type]
    assert caught.value.code == "X_JOB_TENANT_REQUIRED"
    with pytest.raises(TypeError):
        backfill(name="no-tenant", source=lambda ctx: Post.objects.all(), handle=slugify)  # type: ignore[call-arg]


def test_every_backfill_statement_runs_against_the_migrated_schema() -> None:
    from ultimate_jobs.contracts.schedules import BackfillBegin
    from ultimate_jobs.core.ids import new_id
    from ultimate_jobs.drivers.postgres.executor import django_executor
    from ultimate_jobs.drivers.postgres.queries import backfills as sql_backfills

    ran: set[str] = set()
    inner = django_executor("default")

    class Recorder:
        alias = "default"

        def query(self, sql: str, params: Any = None, **options: Any) -> list[tuple[Any, ...]]:
            ran.add(sql)
            return inner.query(sql, params, **options)

    clock = FrozenClock()
    store = PostgresDriver(clock=clock, executor=Recorder()).backfills  # type: ignore[arg-type]
    begin = BackfillBegin(name="stmts", tenant_id=None, checksum="c", app_version=None, job_id=new_id(),
                          run_id=new_id(), now_ms=clock.now_ms())  # fmt: skip
    row = store.begin(begin)
    assert store.progress(row.id, rows_processed=1, batches=1, last_cursor=1, now_ms=clock.now_ms())
    assert store.finish(row.id, status="completed", now_ms=clock.now_ms())
    assert store.completed("stmts", None) is not None
    assert [r.id for r in store.list(name="stmts")] == [row.id]
    constants = {getattr(sql_backfills, n) for n in dir(sql_backfills) if n.startswith("SQL_")}
    assert ran == constants
