"""Every statement of the backfill ledger (``driver.backfills``, table ``x_backfills``), verbatim, one
constant each.

The conventions of :mod:`.jobs` hold here too: named parameters, the caller's clock injected as epoch ms
and converted with ``to_timestamp(%(now)s / 1000.0)`` (no statement compares with the server's
``now()``), times read back as epoch ms. Every statement answers rows in ``BACKFILL_COLUMNS`` order.
"""

from __future__ import annotations

__all__ = [
    "SQL_BACKFILL_BEGIN",
    "SQL_BACKFILL_COMPLETED",
    "SQL_BACKFILL_FINISH",
    "SQL_BACKFILL_LIST",
    "SQL_BACKFILL_PROGRESS",
]

BACKFILL_COLUMNS = """id::text AS id, name, tenant_id, checksum, status, app_version, rows_processed, batches,
       last_cursor, job_id::text AS job_id, run_id::text AS run_id, error_code,
       (extract(epoch from started_at) * 1000)::bigint AS started_at,
       (extract(epoch from updated_at) * 1000)::bigint AS updated_at,
       (extract(epoch from completed_at) * 1000)::bigint AS completed_at"""

# SQL_BACKFILL_BEGIN — driver.backfills.begin(): the ledger row of run %(run_id)s, set running. A retry of
# the run adopts its own row (the unique run_id): started_at, the checksum the pass began with, the counts
# and the id are kept, the app version becomes this attempt's, an earlier attempt's error or completion is
# cleared. A run with no row inserts one started at %(now)s. Concurrent attempts of one run serialise on
# the unique index.
SQL_BACKFILL_BEGIN = f"""INSERT INTO x_backfills AS b (id, name, tenant_id, checksum, status, app_version,
                              rows_processed, batches, last_cursor, job_id, run_id, error_code, started_at,
                              updated_at, completed_at)
VALUES (%(id)s, %(name)s, %(tenant_id)s, %(checksum)s, 'running', %(app_version)s, 0, 0, NULL, %(job_id)s,
        %(run_id)s, NULL, to_timestamp(%(now)s / 1000.0), to_timestamp(%(now)s / 1000.0), NULL)
ON CONFLICT (run_id) DO UPDATE
SET status = 'running', app_version = excluded.app_version, error_code = NULL,
    completed_at = NULL, updated_at = excluded.updated_at
RETURNING {BACKFILL_COLUMNS}"""

# SQL_BACKFILL_PROGRESS — driver.backfills.progress(): a pass's counts and last cursor after a page, by
# primary key; only a running row moves (a settled pass is history). Answers the row id when it landed.
SQL_BACKFILL_PROGRESS = """UPDATE x_backfills
SET rows_processed = %(rows)s, batches = %(batches)s, last_cursor = %(cursor)s::jsonb,
    updated_at = to_timestamp(%(now)s / 1000.0)
WHERE id = %(id)s AND status = 'running'
RETURNING id"""

# SQL_BACKFILL_FINISH — driver.backfills.finish(): settle a pass completed (stamping completed_at) or failed
# (keeping its error code), by primary key; a NULL count keeps the stored one. Answers the row id.
SQL_BACKFILL_FINISH = """UPDATE x_backfills
SET status = %(status)s,
    rows_processed = coalesce(%(rows)s, rows_processed),
    batches = coalesce(%(batches)s, batches),
    error_code = CASE WHEN %(status)s = 'failed' THEN %(error_code)s END,
    completed_at = CASE WHEN %(status)s = 'completed' THEN to_timestamp(%(now)s / 1000.0) END,
    updated_at = to_timestamp(%(now)s / 1000.0)
WHERE id = %(id)s
RETURNING id"""

# SQL_BACKFILL_COMPLETED — driver.backfills.completed(): the newest completed pass of %(name)s under
# %(tenant_id)s (NULL: the cross-tenant pass), on x_backfills_name_idx — what makes a re-run skip.
SQL_BACKFILL_COMPLETED = f"""SELECT {BACKFILL_COLUMNS}
FROM x_backfills
WHERE name = %(name)s AND tenant_id IS NOT DISTINCT FROM %(tenant_id)s AND status = 'completed'
ORDER BY started_at DESC, id DESC
LIMIT 1"""

# SQL_BACKFILL_LIST — driver.backfills.list(): ledger rows newest first, of one name (x_backfills_name_idx)
# and/or one status when given (NULL: any), at most %(limit)s — what operator.inspect_backfills reads.
SQL_BACKFILL_LIST = f"""SELECT {BACKFILL_COLUMNS}
FROM x_backfills
WHERE (%(name)s::text IS NULL OR name = %(name)s) AND (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY started_at DESC, id DESC
LIMIT %(limit)s"""
