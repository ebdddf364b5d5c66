"""The factories' callables written as ``async def`` run, on Postgres: a backfill's ``handle`` and ``count``,
an export's ``row``, a webhook's ``endpoint`` and ``event`` — each through Django's async ORM, each observed
by what it did (rows updated, parts written, a POST received). Their sync job bodies run each one to
completion with ``async_to_sync``, so the async ORM comes back to the attempt's thread: a backfill page's
async writes commit or roll back with that page, and the run's org scope follows (another org's row is
refused inside the async code as it is in sync code).

The still-refused async callables (a backfill's ``source``, an export's ``prefix``/``source``/``sink``, a
webhook ledger's methods, async generators anywhere): tests/unit/test_async_refused.py.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.files.storage import FileSystemStorage

from tests.conftest import AnyJobsEnv, installed
from tests.helpers import many_posts
from tests.secapp.models import Bucket, Item, Post
from tests.webhook_receiver import Receiver, running_receiver
from ultimate_jobs import backfill, export_part_key, export_rows, webhook
from ultimate_jobs.core.scope import current_tenant
from ultimate_jobs.core.signals import CancelSignal
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.models import WebhookDelivery
from ultimate_jobs.testing import FrozenClock, run_jobs
from ultimate_jobs.webhooks import WebhookEndpoint, WebhookEvent, WebhookInput, django_webhook_ledger

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("own_backfills")]

FAST = 1_000  # pages per second: no page waits


@pytest.fixture
def pg() -> Iterator[AnyJobsEnv]:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        yield env


def posts(n: int) -> list[int]:
    many_posts(n, "Post {i}")
    return list(Post.objects.order_by("pk").values_list("pk", flat=True))


# -- backfill --------------------------------------------------------------------------------------


def test_an_async_backfill_handle_and_count_run_through_the_async_orm(pg: AnyJobsEnv) -> None:
    posts(250)
    counted: list[int] = []

    async def slug_page(rows: list[Post], signal: CancelSignal) -> None:
        assert not signal.aborted
        await asyncio.sleep(0)  # a real await: the page's coroutine yields to its loop
        await Post.objects.filter(pk__in=[p.pk for p in rows]).aupdate(slug="swept")

    async def left(ctx: Any) -> int:
        counted.append(await Post.objects.filter(slug="").acount())
        return counted[-1]

    sweep = backfill(name="async-slugs", tenant="none", batch=100, rate=FAST,
                     source=lambda ctx: Post.objects.all(), handle=slug_page, count=left)  # fmt: skip
    enqueued = sweep.enqueue()
    report = run_jobs(pg.driver, clock=pg.clock)
    assert report.last(enqueued.id).result == {  # type: ignore[union-attr]
        "name": "async-slugs", "batches": 3, "rows": 250, "skipped": False,
    }  # fmt: skip
    assert Post.objects.filter(slug="swept").count() == 250 and counted == [0]


def test_an_async_handles_writes_commit_or_roll_back_with_its_page(pg: AnyJobsEnv) -> None:
    """The second page's handle writes through the async ORM and then fails: its writes roll back with the
    page (they ran on the page's own transaction), the first page's stay committed with its checkpoint."""
    pks = posts(4)

    async def slug_then_fail(rows: list[Post], signal: CancelSignal) -> None:
        await Post.objects.filter(pk__in=[p.pk for p in rows]).aupdate(slug="swept")
        if rows[0].pk == pks[2]:
            raise RuntimeError("the second page fails after its writes")

    sweep = backfill(name="async-rollback", tenant="none", batch=2, rate=FAST, retry={"attempts": 1},
                     source=lambda ctx: Post.objects.all(), handle=slug_then_fail)  # fmt: skip
    enqueued = sweep.enqueue()
    last = run_jobs(pg.driver, clock=pg.clock).last(enqueued.id)
    assert last is not None and last.outcome == "dead-lettered"
    assert dict(Post.objects.values_list("pk", "slug")) == {pks[0]: "swept", pks[1]: "swept", pks[2]: "", pks[3]: ""}


def test_an_async_handle_acts_under_the_runs_org(pg: AnyJobsEnv) -> None:
    mine = Bucket.objects.create(org_id="org-a", name="a")
    Item.objects.create(org_id="org-a", bucket=mine, secret="s", total=1)
    orgs: list[str | None] = []

    async def bump(rows: list[Item], signal: CancelSignal) -> None:
        orgs.append(current_tenant())
        for item in rows:
            item.total += 1
            await item.asave(update_fields=["total"])

    per_org = backfill(name="async-per-org", tenant=lambda i: i.org_id, rate=FAST,
                       source=lambda ctx: Item.objects.filter(org_id=current_tenant()), handle=bump)  # fmt: skip
    per_org.enqueue({"org_id": "org-a"})
    assert run_jobs(pg.driver, clock=pg.clock).outcomes == {"completed": 1}
    assert orgs == ["org-a"] and Item.objects.get().total == 2


# -- export ----------------------------------------------------------------------------------------


def test_an_async_export_row_is_awaited_for_every_row_in_order(pg: AnyJobsEnv, tmp_path: Path) -> None:
    pks = posts(5)
    storage = FileSystemStorage(location=str(tmp_path / "exports"))

    async def row(post: Post) -> dict[str, Any]:
        fresh = await Post.objects.aget(pk=post.pk)  # the async ORM, on the page's thread
        return {"id": fresh.pk, "title": fresh.title.upper()}

    export = export_rows(name="posts.async", tenant="none", prefix=lambda i: "exports/async",
                         source=lambda run: Post.objects.all(), columns=["id", "title"], row=row,
                         sink=lambda: storage, batch=2)  # fmt: skip
    export.enqueue({})
    report = run_jobs(pg.driver, clock=pg.clock)
    assert report.executions[-1].result == {"prefix": "exports/async", "parts": 3, "rows": 5, "format": "csv"}
    parts = []
    for i in range(3):
        with storage.open(export_part_key("exports/async", i, "csv")) as fh:
            parts.append(fh.read())
    rows = list(csv.DictReader(io.StringIO(b"".join(parts).decode())))
    assert rows == [{"id": str(pk), "title": f"POST {n}"} for n, pk in enumerate(pks)]


def test_an_async_row_that_answers_no_mapping_is_refused_like_a_sync_one(pg: AnyJobsEnv, tmp_path: Path) -> None:
    posts(1)
    storage = FileSystemStorage(location=str(tmp_path / "exports"))

    async def row(post: Post) -> Any:
        return [post.pk]

    export = export_rows(name="posts.async.bad", tenant="none", prefix=lambda i: "exports/bad",
                         retry={"attempts": 1}, source=lambda run: Post.objects.all(), columns=["id"], row=row,
                         sink=lambda: storage)  # fmt: skip
    enqueued = export.enqueue({})
    last = run_jobs(pg.driver, clock=pg.clock).last(enqueued.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_EXPORT_ROW_INVALID")


# -- webhook ---------------------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as server:
        yield server


def test_async_webhook_endpoint_and_event_read_the_orm_and_the_post_is_sent(pg: AnyJobsEnv, receiver: Receiver) -> None:
    mine = Bucket.objects.create(org_id="org-a", name="partner-a")
    theirs = Bucket.objects.create(org_id="org-b", name="partner-b")

    async def endpoint(i: WebhookInput) -> WebhookEndpoint | None:
        bucket = await Bucket.objects.filter(pk=int(i.endpoint_id)).afirst()  # tenant-scoped: the run's org only
        return None if bucket is None else WebhookEndpoint(id=str(bucket.pk), url=receiver.url, secret="whsec_a")

    async def event(i: WebhookInput) -> WebhookEvent:
        count = await Bucket.objects.filter(org_id=i.org_id).acount()
        return WebhookEvent(id=i.event_id, topic="buckets.counted", body={"buckets": count})

    deliver = webhook(name="partner.async", tenant=lambda i: i.org_id, endpoint=endpoint, event=event,
                      ledger=django_webhook_ledger(), retry={"attempts": 1})  # fmt: skip
    sent = deliver.enqueue({"endpoint_id": str(mine.pk), "event_id": "evt-1", "org_id": "org-a"})
    refused = deliver.enqueue({"endpoint_id": str(theirs.pk), "event_id": "evt-2", "org_id": "org-a"})
    report = run_jobs(pg.driver, clock=pg.clock)

    assert report.last(sent.id).outcome == "completed"  # type: ignore[union-attr]
    (got,) = receiver.requests
    assert json.loads(got.body) == {"buckets": 1} and got.headers["x-ultimate-webhook-topic"] == "buckets.counted"
    assert [(d.endpoint_id, d.status_code) for d in WebhookDelivery.objects.all()] == [(str(mine.pk), 200)]
    # org B's endpoint read inside org A's run, in async code: refused by the tenant guard, nothing sent
    last = report.last(refused.id)
    assert last is not None and (last.outcome, last.code) == ("dead-lettered", "X_TENANCY_ACTOR_MISMATCH")
