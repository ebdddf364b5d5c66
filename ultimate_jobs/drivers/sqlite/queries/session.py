"""Every statement the SQLite driver runs on the connection itself rather than on a table's rows: the journal
mode, the write transaction's bounds, and the cross-process watch's reads."""

from __future__ import annotations

# SQL_WAL — switch the file to write-ahead logging (kept by the file): readers never block the writer.
SQL_WAL = "PRAGMA journal_mode=WAL"
# SQL_BEGIN_IMMEDIATE — take SQLite's one write lock first, so a read-then-write never fails on a moved snapshot.
SQL_BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
SQL_COMMIT = "COMMIT"
SQL_ROLLBACK = "ROLLBACK"

# SQL_DATA_VERSION — a counter that moves when another connection commits to the file (no table read).
SQL_DATA_VERSION = "PRAGMA data_version"

# SQL_WATCH_DUE — which queues hold a row a claim would take now (x_jobs_claim_idx, x_jobs_lease_idx),
# at most 64; run by the watch only after another connection committed.
SQL_WATCH_DUE = """
SELECT DISTINCT queue FROM (
    SELECT queue FROM x_jobs WHERE state IN ('ready', 'delayed', 'suspended') AND run_at <= :now
    UNION ALL
    SELECT queue FROM x_jobs WHERE state = 'running' AND lease_until <= :now
)
LIMIT 64
"""
