"""The statements retention and the stats rely on are served by their partial indexes: the stats read no
finished row but the dead-letter queue's, and each retention delete walks only what it may delete.

The planner is asked with sequential scans priced out (``enable_seqscan = off``): on a test table of a
few rows it would rightly pick a scan, and the question here is whether the index CAN serve the query.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from ultimate_jobs.drivers.postgres import sql
from ultimate_jobs.outbox import sql as outbox_sql

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def plan(statement: str, params: dict[str, Any]) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + statement, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_stats_read_live_rows_by_their_partial_index_and_no_finished_row() -> None:
    text = plan(sql.SQL_STATS, {"now": 0})
    assert "x_jobs_live_queue_idx" in text
    assert "Seq Scan on x_jobs" not in text
    assert "'done'" not in text and "'failed'" not in text and "'cancelled'" not in text


def test_the_finished_purge_walks_the_finished_index() -> None:
    text = plan(sql.SQL_PURGE_FINISHED, {"states": ["done", "dead"], "before": [1, 2], "limit": 10})
    assert "x_jobs_finished_idx" in text
    assert "Seq Scan on x_jobs " not in text


def test_the_outbox_purge_walks_the_published_index() -> None:
    text = plan(outbox_sql.SQL_OUTBOX_PURGE_PUBLISHED, {"before": 1, "limit": 10})
    assert "x_outbox_published_idx" in text
