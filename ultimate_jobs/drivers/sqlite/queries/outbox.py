"""Every statement of the SQLite outbox store, verbatim, one constant each.

The conventions of the SQLite driver's statements hold: SQLite's named parameters, instants as the column
text the caller computed from its clock, lists as JSON arrays read with ``json_each``. The stage runs on
the CALLER'S connection, inside the caller's transaction; a claim's read and stamp run in one
``BEGIN IMMEDIATE`` transaction, so two relays never take one row.
"""

from __future__ import annotations

OUTBOX_COLUMNS = "id, run_id, request, staged_at, claimed_by, claimed_at"

# SQL_OUTBOX_STAGE — write a batch of staged enqueues in ONE statement, in the caller's transaction:
# the rows exist exactly when the business rows commit. :rows is a JSON array of {id, run_id, name, queue,
# request}; every row gets staged_at = :now.
SQL_OUTBOX_STAGE = """
INSERT INTO x_outbox (id, run_id, name, queue, request, staged_at)
SELECT json_extract(r.value, '$.id'), json_extract(r.value, '$.run_id'), json_extract(r.value, '$.name'),
       json_extract(r.value, '$.queue'), json_extract(r.value, '$.request'), :now
FROM json_each(:rows) r
ORDER BY r.key
"""

# SQL_OUTBOX_CLAIMABLE — up to :limit pending rows (unpublished, not set aside) in staged_at, id
# order (x_outbox_pending_idx) that nobody holds or whose claim lapsed (claimed_at at or before :lapsed).
SQL_OUTBOX_CLAIMABLE = """
SELECT id FROM x_outbox
WHERE published_at IS NULL AND failed_at IS NULL AND (claimed_at IS NULL OR claimed_at <= :lapsed)
ORDER BY staged_at, id
LIMIT :limit
"""

# SQL_OUTBOX_STAMP — stamp the claim on the rows :ids (a JSON array): claimed_at = :now,
# claimed_by = :claimant. Answers the claimed rows (the caller orders them by staged_at, id).
SQL_OUTBOX_STAMP = f"""
UPDATE x_outbox SET claimed_at = :now, claimed_by = :claimant
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING {OUTBOX_COLUMNS}
"""

# SQL_OUTBOX_RELEASE — hand rows back at once, FENCED on the claimant (only rows still unpublished
# and still claimed by :claimed_by), recording the failure when one is given. Answers the ids.
SQL_OUTBOX_RELEASE = """
UPDATE x_outbox SET claimed_at = NULL, claimed_by = NULL, last_error = coalesce(:error, last_error)
WHERE id IN (SELECT value FROM json_each(:ids)) AND claimed_by = :claimed_by AND published_at IS NULL
RETURNING id
"""

# SQL_OUTBOX_MARK_PUBLISHED — retire rows after their publish, FENCED on the claimant; the row stays
# as the audit trail. Answers the ids that landed.
SQL_OUTBOX_MARK_PUBLISHED = """
UPDATE x_outbox SET published_at = :now, last_error = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND claimed_by = :claimed_by AND published_at IS NULL
RETURNING id
"""

# SQL_OUTBOX_SET_ASIDE — take rows out of the claim order with the permanent error that stopped
# their publish, FENCED on the claimant. Answers the ids that landed.
SQL_OUTBOX_SET_ASIDE = """
UPDATE x_outbox SET failed_at = :now, claimed_at = NULL, claimed_by = NULL, last_error = :error
WHERE id IN (SELECT value FROM json_each(:ids)) AND claimed_by = :claimed_by AND published_at IS NULL
RETURNING id
"""

# SQL_OUTBOX_STATS — rows waiting to publish, rows set aside, the oldest waiting row's stage instant.
SQL_OUTBOX_STATS = """
SELECT
    (SELECT count(*) FROM x_outbox WHERE published_at IS NULL AND failed_at IS NULL),
    (SELECT count(*) FROM x_outbox WHERE published_at IS NULL AND failed_at IS NOT NULL),
    (SELECT min(staged_at) FROM x_outbox WHERE published_at IS NULL AND failed_at IS NULL)
"""

# SQL_OUTBOX_FAILED — the set-aside rows, oldest stage first, up to :limit (x_outbox_failed_idx).
SQL_OUTBOX_FAILED = """
SELECT id, name, queue, staged_at, failed_at, last_error
FROM x_outbox
WHERE published_at IS NULL AND failed_at IS NOT NULL
ORDER BY staged_at, id
LIMIT :limit
"""

# SQL_OUTBOX_RETRY_FAILED — put set-aside rows back in the claim order (they keep their stage
# instant). Answers the ids that landed.
SQL_OUTBOX_RETRY_FAILED = """
UPDATE x_outbox SET failed_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND published_at IS NULL AND failed_at IS NOT NULL
RETURNING id
"""

# SQL_OUTBOX_REMOVE_FAILED — delete set-aside rows for good. Answers the ids that landed.
SQL_OUTBOX_REMOVE_FAILED = """
DELETE FROM x_outbox
WHERE id IN (SELECT value FROM json_each(:ids)) AND published_at IS NULL AND failed_at IS NOT NULL
RETURNING id
"""

# SQL_OUTBOX_PURGE_PUBLISHED — retention: delete at most :limit rows published before :before,
# oldest published first, in ONE short statement (x_outbox_published_idx). Answers the ids that went.
SQL_OUTBOX_PURGE_PUBLISHED = """
DELETE FROM x_outbox
WHERE id IN (
    SELECT id FROM x_outbox WHERE published_at IS NOT NULL AND published_at < :before
    ORDER BY published_at LIMIT :limit
)
RETURNING id
"""
