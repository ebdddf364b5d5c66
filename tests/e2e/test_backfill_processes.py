"""A backfill over 40,000 rows (40 pages) in real worker processes: worker A is SIGKILLed mid-pass, worker B
resumes on the page A stopped at — the pages A checkpointed are not handled again — and the pass ends
with every row swept and one completed ledger row.

The children run ``manage.py jobs_worker`` with :mod:`tests.e2e.backfill_settings`; the spawn, query and
effects fixtures are those of :mod:`tests.e2e.test_postgres_processes`.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.e2e.test_postgres_processes import (  # noqa: F401 — fixtures used by name
    Spawn,
    effects_table,
    query,
    row_in,
    spawn,
    start_workers,
)
from tests.helpers import POLL_S, START_S, Child, eventually, many_posts
from tests.secapp.models import Post
from ultimate_jobs import operator
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROWS = 40_000  # 40 pages: A is killed after 10, and at the backfill's rate the other 30 take it 1.5 s at least
SETTINGS = "tests.e2e.backfill_settings"


@pytest.fixture
def installed_pg() -> Iterator[PostgresDriver]:
    """A Postgres driver on the test database for this process's enqueue and ledger reads."""
    driver = PostgresDriver()
    set_job_driver(driver)
    try:
        yield driver
    finally:
        set_job_driver(None)
        registry.unregister("e2e-sweep-posts")


def start_worker(spawn: Spawn, name: str) -> Child:  # noqa: F811 — the fixture, passed in
    (worker,) = start_workers(spawn, name, vt="2s", concurrency=1, DJANGO_SETTINGS_MODULE=SETTINGS)
    return worker


def pages() -> list[tuple[int, int]]:
    """``(first pk, worker pid)`` of every page handled."""
    rows = query("SELECT job_key, worker_pid FROM e2e_effects WHERE job_key LIKE 'page:%%'")
    return [(int(key.split(":")[1]), pid) for key, pid in rows]


def test_a_sigkilled_pass_resumes_on_its_page_in_another_worker(spawn: Spawn, installed_pg: PostgresDriver) -> None:  # noqa: F811
    from tests.e2e.backfill_jobs import BATCH, sweep_posts

    many_posts(ROWS, "post {i}")
    pks = list(Post.objects.order_by("pk").values_list("pk", flat=True))
    firsts = pks[::BATCH]
    enqueued = sweep_posts.enqueue()

    a = start_worker(spawn, "A")
    eventually(lambda: len(pages()) >= 10, timeout=START_S, interval=POLL_S)
    a.signal(signal.SIGKILL)  # mid-pass: no drain, no settle, the row stays running under A's lease
    assert a.wait() == -signal.SIGKILL
    by_a = [first for first, pid in pages() if pid == a.pid]
    assert 10 <= len(by_a) < len(firsts)

    b = start_worker(spawn, "B")
    done = eventually(row_in(enqueued.id, "done"), timeout=120.0, interval=0.2)
    assert done["attempts"] == 2, b.describe()

    by_b = [first for first, pid in pages() if pid == b.pid]
    # B starts on the page A stopped at: the page in flight when A died, or the one after A's last
    # checkpoint — never from the beginning, and it hands no page A checkpointed to handle again
    last_a, first_b = max(by_a), min(by_b)  # pages go in pk order within a worker
    assert first_b in (last_a, firsts[firsts.index(last_a) + 1]), (sorted(by_a)[-3:], sorted(by_b)[:3])
    assert sorted(set(by_a) | set(by_b)) == firsts
    assert len(set(by_a) & set(by_b)) <= 1
    assert not Post.objects.exclude(slug="swept").exists()

    (row,) = operator.inspect_backfills(name="e2e-sweep-posts")
    assert (row.run.status, row.run.run_id, row.run.rows_processed) == ("completed", enqueued.run_id, ROWS)
    assert row.run.batches == ROWS // BATCH + 1  # the last page comes back empty
    assert row.run.last_cursor == pks[-1]
