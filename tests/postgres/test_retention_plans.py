"""The statements retention and the stats rely on are served by indexes the claim and settle maintain
anyway: the stats read no finished row but the dead-letter queue's, and each retention delete walks only
ranges of the states it may delete.

The planner is asked with sequential scans priced out (``enable_seqscan = off``): on a test table of a
few rows it would rightly pick a scan, and the question here is whether the index CAN serve the query.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from ultimate_jobs.drivers.postgres.queries import jobs as sql
from ultimate_jobs.drivers.postgres.queries import outbox as outbox_sql

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def plan(statement: str, params: dict[str, Any]) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + statement, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_stats_read_live_rows_by_the_state_index_and_no_finished_row() -> None:
    text = plan(sql.SQL_STATS, {"now": 0})
    assert "x_jobs_state_queue_idx" in text
    assert "Seq Scan on x_jobs" not in text
    assert "'done'" not in text and "'failed'" not in text and "'cancelled'" not in text


def test_the_finished_purge_walks_ranges_of_the_state_index() -> None:
    text = plan(sql.SQL_PURGE_FINISHED, {"states": ["done", "dead"], "before": [1, 2], "limit": 10})
    assert "x_jobs_state_queue_idx" in text
    assert "Seq Scan on x_jobs " not in text


def test_x_jobs_carries_no_index_for_the_stats_or_retention_alone() -> None:
    """Each index on x_jobs is an insert on every claim and settle: the history indexes an earlier 0008
    built are not there, and the table has exactly the indexes the queue's own statements walk."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'x_jobs' ORDER BY indexname")
        names = [row[0] for row in cursor.fetchall()]
    assert "x_jobs_live_queue_idx" not in names and "x_jobs_finished_idx" not in names
    assert {"x_jobs_claim_idx", "x_jobs_lease_idx", "x_jobs_state_queue_idx", "x_jobs_created_idx"} <= set(names)


def test_the_outbox_purge_walks_the_published_index() -> None:
    text = plan(outbox_sql.SQL_OUTBOX_PURGE_PUBLISHED, {"before": 1, "limit": 10})
    assert "x_outbox_published_idx" in text
