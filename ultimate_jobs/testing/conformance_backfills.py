"""The backfill ledger's conformance scenarios (``driver.backfills``): one row per pass, adopted by the
pass's retries, settled completed or failed, listed newest first. Mixed into
:class:`~ultimate_jobs.testing.conformance.DriverConformance`."""

from __future__ import annotations

from ..contracts.protocol import BackfillStore
from ..contracts.schedules import BackfillBegin
from ..core.ids import new_id
from .clock import FrozenClock

NAME = "conformance.rewrite"


def begin(clock: FrozenClock, *, run_id: str | None = None, name: str = NAME, tenant_id: str | None = None,
          checksum: str = "c1") -> BackfillBegin:  # fmt: skip
    """The begin of one pass (a fresh run unless ``run_id`` names one) at the clock's now."""
    return BackfillBegin(
        name=name,
        tenant_id=tenant_id,
        checksum=checksum,
        app_version="v1",
        job_id=new_id(),
        run_id=run_id or new_id(),
        now_ms=clock.now_ms(),
    )


class BackfillContract:
    """``driver.backfills``: the ``x_backfills`` ledger."""

    def test_backfill_begin_inserts_a_running_row(self, backfills: BackfillStore, clock: FrozenClock) -> None:
        b = begin(clock)
        row = backfills.begin(b)
        assert (row.name, row.status, row.run_id, row.job_id) == (NAME, "running", b.run_id, b.job_id)
        assert (row.rows_processed, row.batches, row.last_cursor, row.completed_at_ms) == (0, 0, None, None)
        assert row.started_at_ms == clock.now_ms() and row.checksum == "c1" and row.app_version == "v1"
        assert backfills.list() == [row]

    def test_backfill_retry_adopts_its_row(self, backfills: BackfillStore, clock: FrozenClock) -> None:
        first = backfills.begin(begin(clock))
        assert backfills.progress(first.id, rows_processed=30, batches=3, last_cursor=30, now_ms=clock.now_ms())
        assert backfills.finish(first.id, status="failed", error_code="X_BOOM", now_ms=clock.now_ms())
        clock.advance(60_000)
        again = backfills.begin(begin(clock, run_id=first.run_id, checksum="c2"))
        assert again.id == first.id and again.status == "running" and again.error_code is None
        assert again.started_at_ms == first.started_at_ms  # when the pass began, not this attempt
        assert again.checksum == "c1"  # the checksum the pass began with; the pass warns that it moved
        assert (again.rows_processed, again.batches, again.last_cursor) == (30, 3, 30)
        assert len(backfills.list()) == 1

    def test_backfill_progress_moves_only_a_running_row(self, backfills: BackfillStore, clock: FrozenClock) -> None:
        row = backfills.begin(begin(clock))
        clock.advance(5)
        assert backfills.progress(row.id, rows_processed=10, batches=1, last_cursor="k-10", now_ms=clock.now_ms())
        (stored,) = backfills.list()
        assert (stored.rows_processed, stored.batches, stored.last_cursor) == (10, 1, "k-10")
        assert stored.updated_at_ms == clock.now_ms()
        assert backfills.finish(row.id, status="completed", now_ms=clock.now_ms())
        assert not backfills.progress(row.id, rows_processed=99, batches=9, last_cursor=99, now_ms=clock.now_ms())
        assert backfills.list()[0].rows_processed == 10
        assert not backfills.progress(new_id(), rows_processed=1, batches=1, last_cursor=1, now_ms=clock.now_ms())

    def test_backfill_finish_completed_and_failed(self, backfills: BackfillStore, clock: FrozenClock) -> None:
        ok = backfills.begin(begin(clock))
        clock.advance(10)
        assert backfills.finish(ok.id, status="completed", rows_processed=7, batches=2, now_ms=clock.now_ms())
        bad = backfills.begin(begin(clock, name="conformance.other"))
        assert backfills.finish(bad.id, status="failed", error_code="X_BACKFILL_STALLED", now_ms=clock.now_ms())
        done = backfills.list(status="completed")
        assert [(r.id, r.rows_processed, r.batches, r.completed_at_ms) for r in done] == [(ok.id, 7, 2, clock.now_ms())]
        (failed,) = backfills.list(status="failed")
        assert (failed.id, failed.error_code, failed.completed_at_ms) == (bad.id, "X_BACKFILL_STALLED", None)
        assert not backfills.finish(new_id(), status="completed", now_ms=clock.now_ms())

    def test_backfill_completed_is_the_newest_completed_row(self, backfills: BackfillStore, clock: FrozenClock) -> None:
        assert backfills.completed(NAME, None) is None
        first = backfills.begin(begin(clock))
        assert backfills.completed(NAME, None) is None  # running blocks nothing
        backfills.finish(first.id, status="completed", now_ms=clock.now_ms())
        clock.advance(1_000)
        forced = backfills.begin(begin(clock))  # force: a new run, a new row
        assert forced.id != first.id
        completed = backfills.completed(NAME, None)
        assert completed is not None and completed.id == first.id
        backfills.finish(forced.id, status="completed", now_ms=clock.now_ms())
        completed = backfills.completed(NAME, None)
        assert completed is not None and completed.id == forced.id
        assert backfills.completed(NAME, "org-1") is None  # another tenant's pass is another pass
        assert backfills.completed("conformance.nobody", None) is None

    def test_backfill_list_newest_first_and_filtered(self, backfills: BackfillStore, clock: FrozenClock) -> None:
        ids = []
        for name in (NAME, "conformance.b", NAME):
            ids.append(backfills.begin(begin(clock, name=name)).id)
            clock.advance(10)
        assert [r.id for r in backfills.list()] == ids[::-1]
        assert [r.id for r in backfills.list(name=NAME)] == [ids[2], ids[0]]
        assert [r.id for r in backfills.list(limit=1)] == [ids[2]]
        backfills.finish(ids[1], status="completed", now_ms=clock.now_ms())
        assert [r.id for r in backfills.list(status="completed")] == [ids[1]]
        assert [r.id for r in backfills.list(status="running", name=NAME)] == [ids[2], ids[0]]
        assert backfills.list(name="conformance.nobody") == []
