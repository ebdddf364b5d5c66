"""Exports and webhooks in real worker processes (``manage.py jobs_worker`` with
:mod:`tests.e2e.outbound_settings`, jobs :mod:`tests.e2e.outbound_jobs`):

- an export of 60,000 rows (60 parts): worker A is SIGKILLed mid-export, worker B resumes at the page A stopped on
  (the parts A wrote before are not rewritten), and the concatenated parts hold every row exactly once;
- a webhook whose POST is on the wire when the worker gets SIGTERM: the drain lets it finish, the
  delivery is recorded in the ledger and the job completes — one request, no re-POST.

The spawn, query and effects fixtures are those of :mod:`tests.e2e.test_postgres_processes`.
"""

from __future__ import annotations

import csv
import io
import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_postgres_processes import (  # noqa: F401 — fixtures used by name
    Spawn,
    effects_table,
    row_in,
    spawn,
    start_workers,
)
from tests.helpers import POLL_S, START_S, Child, eventually, many_posts
from tests.secapp.models import Post
from tests.webhook_receiver import Receiver, Reply, running_receiver
from ultimate_jobs import export_part_key, verify_webhook_signature
from ultimate_jobs.core import registry
from ultimate_jobs.core.installed import set_job_driver
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.models import WebhookDelivery

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROWS = 60_000  # 60 parts: A is killed after 20, and at the export's rate the other 40 take it 2 s at least
SETTINGS = "tests.e2e.outbound_settings"


@pytest.fixture
def installed_pg() -> Iterator[PostgresDriver]:
    driver = PostgresDriver()
    set_job_driver(driver)
    try:
        yield driver
    finally:
        set_job_driver(None)
        registry.unregister("e2e-export-posts")
        registry.unregister("e2e-deliver")


def start_worker(spawn: Spawn, name: str, **env: str) -> Child:  # noqa: F811 — the fixture, passed in
    (worker,) = start_workers(spawn, name, vt="2s", concurrency=1, DJANGO_SETTINGS_MODULE=SETTINGS, **env)
    return worker


def test_a_sigkilled_export_resumes_and_its_parts_hold_every_row_once(
    spawn: Spawn,  # noqa: F811
    installed_pg: PostgresDriver,
    tmp_path: Path,
) -> None:
    from tests.e2e.outbound_jobs import export_posts

    many_posts(ROWS, "post, {i}")
    pks = list(Post.objects.order_by("pk").values_list("pk", flat=True))
    folder = tmp_path / "exports" / "kill"
    env = {"UJ_EXPORT_DIR": str(tmp_path)}
    enqueued = export_posts.enqueue({"export_id": "kill"})

    def parts() -> list[Path]:
        return sorted(folder.glob("part-*.csv")) if folder.exists() else []

    a = start_worker(spawn, "A", **env)
    eventually(lambda: len(parts()) >= 20, timeout=START_S, interval=POLL_S)
    a.signal(signal.SIGKILL)  # mid-export: no drain, no settle, the row stays running under A's lease
    assert a.wait() == -signal.SIGKILL
    by_a = {p.name: p.stat().st_mtime_ns for p in parts()}
    assert 20 <= len(by_a) < ROWS // 1_000

    b = start_worker(spawn, "B", **env)
    done = eventually(row_in(enqueued.id, "done"), timeout=120.0, interval=0.2)
    assert done["attempts"] == 2, b.describe()

    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["parts"], manifest["rows"]) == (ROWS // 1_000, ROWS)
    written = [(tmp_path / export_part_key("exports/kill", i, "csv")).read_bytes() for i in range(manifest["parts"])]
    rows = list(csv.DictReader(io.StringIO(b"".join(written).decode(), newline="")))
    assert [int(r["id"]) for r in rows] == pks  # every row, once, in order
    assert rows[0]["title"] == "post, 0"
    # B resumed where A stopped: the parts A checkpointed are untouched (at most the page in flight is rewritten)
    rewritten = [name for name, mtime in by_a.items() if (folder / name).stat().st_mtime_ns != mtime]
    assert len(rewritten) <= 1, rewritten
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json"] + [
        f"part-{i:05d}.csv" for i in range(manifest["parts"])
    ]


def test_sigterm_during_a_slow_post_lets_it_finish_and_records_it(
    spawn: Spawn,  # noqa: F811
    installed_pg: PostgresDriver,
) -> None:
    from tests.e2e.outbound_jobs import SECRET, deliver

    with running_receiver() as receiver:
        hold = threading.Event()
        receiver.reply(Reply(202, hold=hold))
        enqueued = deliver.enqueue({"endpoint_id": "ep-slow", "event_id": "evt_slow"})
        worker = start_worker(spawn, "W", UJ_WEBHOOK_URL=receiver.url, UJ_LOG_LEVEL="INFO")
        assert receiver.arrived.wait(START_S), worker.describe()
        worker.signal(signal.SIGTERM)  # the drain begins with the POST on the wire
        # the accept phase has aborted the job's signal (X_DRAINING): the POST is still open, not torn down
        eventually(lambda: "jobs.worker.draining" in worker.stderr, timeout=START_S, interval=POLL_S)
        assert worker.popen.poll() is None and not receiver.answered.is_set(), worker.describe()
        hold.set()  # the receiver answers; the drain waits for it
        assert worker.wait(timeout=15) == 0, worker.describe()
        assert receiver.answered.wait(10)  # marked after the reply's flush, which the worker may read first
        check_single_delivery(receiver, enqueued.id, SECRET)


def check_single_delivery(receiver: Receiver, job_id: str, secret: str) -> None:
    row = row_in(job_id, "done")()
    assert row["attempts"] == 1
    (got,) = receiver.requests
    assert verify_webhook_signature(got, secret).event_id == "evt_slow"
    (delivery,) = WebhookDelivery.objects.all()
    assert (delivery.endpoint_id, delivery.status_code, delivery.ok, delivery.consecutive_failures) == (
        "ep-slow",
        202,
        True,
        0,
    )
