"""``make demo`` with no PostgreSQL server: ``manage.py shop_demo`` under the demo's own settings with no
``DATABASE_URL`` runs on the embedded default — an SQLite file it creates on first run — while every
Postgres setting (libpq's PGHOST/PGPORT, REDIS_URL) points at a port that refuses connections. The
scenario completes: the same jobs table, outbox, scheduler and maintenance lines as on Postgres; and a
second run on the same file repeats the first."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_demo import job_rows, table_rows

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port that is bound and never listened on: every connection to it is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def shop_demo(sqlite_file: Path, port: int) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(
        DJANGO_SETTINGS_MODULE="demo_project.settings",
        DEMO_SQLITE_FILE=str(sqlite_file),
        PGHOST="127.0.0.1",
        PGPORT=str(port),
        REDIS_URL=f"redis://127.0.0.1:{port}/0",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shop_demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_demo_completes_on_sqlite_with_no_postgres_reachable(tmp_path: Path, closed_port: int) -> None:
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", closed_port), timeout=2):
        pass  # nothing answers where Postgres would be
    sqlite_file = tmp_path / "demo" / "shop.sqlite3"
    output = shop_demo(sqlite_file, closed_port)
    assert sqlite_file.exists()  # created on first run, with its directory
    assert output.startswith("ultimate_jobs demo shop: SQLite driver (embedded, no server), frozen clock from")

    jobs = job_rows(output)
    assert (jobs["fulfil_order"]["state"], jobs["fulfil_order"]["outcomes"]) == (
        "done",
        "retried → suspended → completed",
    )
    assert (jobs["book_shipment"]["state"], jobs["book_shipment"]["attempts"]) == ("done", "3 of 5")
    assert (jobs["sync_inventory"]["state"], jobs["sync_inventory"]["attempts"]) == ("dead", "3 of 3")
    assert (jobs["issue_refund"]["state"], jobs["issue_refund"]["attempts"]) == ("dead", "1 of 5")
    assert "3 orders across 2 orgs" in jobs["daily_sales_report"]["note"]
    assert (jobs["settle_payouts"]["state"], jobs["settle_payouts"]["outcomes"]) == ("dead", "dead-lettered")
    syncs = [(r["state"], r["outcomes"]) for r in table_rows(output) if r["job"] == "sync_account"]
    assert syncs == [("done", "completed"), ("failed", "refused")]

    assert "x_outbox holds 1 staged row, x_jobs 0 (nothing runs before the relay)" in output
    assert "relay: published 1 row after the COMMIT" in output
    assert "confirm_order for order 1004: no job exists — it never ran (0 runs)" in output
    assert "fired by hand at Tue 2026-01-06 03:00 CET: 1 job(s)" in output
    assert "next poll: completed — reference TRF-2026-0042; order 1003 is now paid" in output
    assert "stranded orders now paid: 3 of 3" in output
    assert "enqueued again without force: skipped=True" in output

    again = shop_demo(sqlite_file, closed_port)  # the same file: the demo clears its own rows first
    assert [(r["job"], r["state"], r["attempts"]) for r in table_rows(again)] == [
        (r["job"], r["state"], r["attempts"]) for r in table_rows(output)
    ]
