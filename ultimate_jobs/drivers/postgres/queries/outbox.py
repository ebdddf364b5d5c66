"""Every statement of the Postgres outbox store, verbatim, one constant each.

Conventions as the driver's ``sql.py``: named parameters; the caller's clock is injected as epoch
milliseconds (``%(now)s``) and converted with ``to_timestamp(%(now)s / 1000.0)`` — no statement
compares with the server's ``now()``; times come back as epoch ms. Every statement but the stage
runs on the pool (the relay's own connection); the stage runs on the CALLER'S connection, inside the
caller's transaction.
"""

from __future__ import annotations

from ....contracts.outbox import OUTBOX_WAKE_CHANNEL

# The columns every statement that answers rows selects, in this order, named as
# drivers.sql.outbox.OUTBOX_FIELDS names them (times as epoch ms).
OUTBOX_COLUMNS = """
    o.id, o.run_id, o.request, (extract(epoch from o.staged_at) * 1000)::bigint AS staged_at,
    o.claimed_by, (extract(epoch from o.claimed_at) * 1000)::bigint AS claimed_at
"""

# SQL_OUTBOX_STAGE — write a batch of staged enqueues in ONE statement, in the caller's transaction:
# the rows exist exactly when the business rows commit. Each row carries the whole EnqueueRequest
# (jsonb) and the ids the router allocated (the row id IS the job id, run_id the job's run id), all
# with staged_at = %(now)s. Announces pg_notify('x_outbox_wake', '') — delivered on COMMIT, never for a
# rollback — unless a committed row is already waiting unclaimed (the throttle, over
# x_outbox_pending_idx; a set-aside row waits for nobody, so it never silences the wake): a relay that
# row woke will find these too, and one NOTIFY per staging commit would serialise those commits behind
# Postgres's notify lock. Answers (staged, announced).
SQL_OUTBOX_STAGE = f"""
WITH req AS (
    SELECT *
    FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
        ord int, id uuid, run_id uuid, name text, queue text, request jsonb
    )
),
waiting AS (
    SELECT EXISTS (
        SELECT 1 FROM x_outbox w WHERE w.published_at IS NULL AND w.failed_at IS NULL AND w.claimed_at IS NULL
    ) AS found
),
ins AS (
    INSERT INTO x_outbox (id, run_id, name, queue, request, staged_at)
    SELECT id, run_id, name, queue, request, to_timestamp(%(now)s / 1000.0)
    FROM req
    ORDER BY ord
    RETURNING id
),
wake AS (
    SELECT pg_notify('{OUTBOX_WAKE_CHANNEL}', '') FROM waiting WHERE NOT waiting.found
)
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM wake)
"""

# SQL_OUTBOX_CLAIM — a claim, not a read: take up to %(limit)s pending rows (unpublished, not set aside) in
# staged_at, id order (x_outbox_pending_idx, walked in its own order) that nobody holds or whose claim lease
# (%(lease)s ms) lapsed, locked FOR UPDATE SKIP LOCKED so two relays never take one row in one
# instant, and STAMPED claimed_at = %(now)s, claimed_by = %(claimant)s in the same statement. Under
# autocommit the row locks end with the statement; the stamp is what keeps a second relay off these
# rows for the lease (a row another relay stamped between our snapshot and our lock fails the
# re-checked predicate and is skipped). Answers the claimed rows in staged_at, id order.
SQL_OUTBOX_CLAIM = f"""
WITH next AS (
    SELECT id
    FROM x_outbox
    WHERE published_at IS NULL AND failed_at IS NULL
      AND (claimed_at IS NULL OR claimed_at <= to_timestamp((%(now)s - %(lease)s) / 1000.0))
    ORDER BY staged_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE x_outbox o
    SET claimed_at = to_timestamp(%(now)s / 1000.0), claimed_by = %(claimant)s
    FROM next
    WHERE o.id = next.id
    RETURNING o.*
)
SELECT {OUTBOX_COLUMNS}
FROM claimed o
ORDER BY o.staged_at, o.id
"""

# SQL_OUTBOX_RELEASE — hand rows back at once (a publish failed and stopped the batch), FENCED on the
# claimant: only rows still unpublished AND still claimed by %(claimed_by)s are released, so a relay
# that stalled past its lease cannot unclaim rows another relay reclaimed and is mid-publish on.
# Records the failure in last_error when one is given. Answers the ids that landed.
SQL_OUTBOX_RELEASE = """
UPDATE x_outbox
SET claimed_at = NULL, claimed_by = NULL, last_error = coalesce(%(error)s, last_error)
WHERE id = ANY(%(ids)s::uuid[]) AND claimed_by = %(claimed_by)s AND published_at IS NULL
RETURNING id
"""

# SQL_OUTBOX_MARK_PUBLISHED — retire rows AFTER their publish, FENCED on the claimant: a relay that
# stalled past its lease cannot retire a row a newer claimant has not published yet (that would lose
# the job). The row stays, with published_at, claimed_by (who published it) as the audit trail; it
# leaves x_outbox_pending_idx. Answers the ids that landed.
SQL_OUTBOX_MARK_PUBLISHED = """
UPDATE x_outbox
SET published_at = to_timestamp(%(now)s / 1000.0), last_error = NULL
WHERE id = ANY(%(ids)s::uuid[]) AND claimed_by = %(claimed_by)s AND published_at IS NULL
RETURNING id
"""

# SQL_OUTBOX_BACKLOG — how many staged rows wait to be published (x_outbox_pending_idx; set-aside rows
# do not wait: SQL_OUTBOX_STATS counts them).
SQL_OUTBOX_BACKLOG = "SELECT count(*) FROM x_outbox WHERE published_at IS NULL AND failed_at IS NULL"

# SQL_OUTBOX_SET_ASIDE — a publish failed with an error retrying cannot fix (the request can never be
# stored: a run_at out of range, text the database refuses): the row leaves the claim order
# (failed_at = %(now)s, unclaimed) with its error, so the rows behind it publish. FENCED on the claimant
# as SQL_OUTBOX_RELEASE is. Answers the ids that landed.
SQL_OUTBOX_SET_ASIDE = """
UPDATE x_outbox
SET failed_at = to_timestamp(%(now)s / 1000.0), claimed_at = NULL, claimed_by = NULL, last_error = %(error)s
WHERE id = ANY(%(ids)s::uuid[]) AND claimed_by = %(claimed_by)s AND published_at IS NULL
RETURNING id
"""

# SQL_OUTBOX_STATS — the outbox at a glance (/metrics): rows waiting to publish, rows set aside, and the
# age of the oldest waiting row's stage instant (epoch ms, NULL when none waits). Both counts walk a
# partial index (x_outbox_pending_idx, x_outbox_failed_idx), never the audit trail.
SQL_OUTBOX_STATS = """
SELECT
    (SELECT count(*) FROM x_outbox WHERE published_at IS NULL AND failed_at IS NULL),
    (SELECT count(*) FROM x_outbox WHERE published_at IS NULL AND failed_at IS NOT NULL),
    (SELECT (extract(epoch from min(staged_at)) * 1000)::bigint
     FROM x_outbox WHERE published_at IS NULL AND failed_at IS NULL)
"""

# SQL_OUTBOX_FAILED — the set-aside rows, oldest stage first, up to %(limit)s (x_outbox_failed_idx): what
# the operator lists. Answers id, name, queue, staged_at and failed_at (epoch ms), last_error.
SQL_OUTBOX_FAILED = """
SELECT id, name, queue, (extract(epoch from staged_at) * 1000)::bigint,
       (extract(epoch from failed_at) * 1000)::bigint, last_error
FROM x_outbox
WHERE published_at IS NULL AND failed_at IS NOT NULL
ORDER BY staged_at, id
LIMIT %(limit)s
"""

# SQL_OUTBOX_RETRY_FAILED — put set-aside rows back in the claim order (an operator fixed the cause, or
# a newer relay can publish them); they keep their stage instant, so they go out before later rows.
# Announces pg_notify('x_outbox_wake', '') when any landed. Answers the ids that landed.
SQL_OUTBOX_RETRY_FAILED = f"""
WITH retried AS (
    UPDATE x_outbox
    SET failed_at = NULL
    WHERE id = ANY(%(ids)s::uuid[]) AND published_at IS NULL AND failed_at IS NOT NULL
    RETURNING id
),
wake AS (
    SELECT pg_notify('{OUTBOX_WAKE_CHANNEL}', '') WHERE EXISTS (SELECT 1 FROM retried)
)
SELECT id FROM retried, (SELECT count(*) FROM wake) AS announced
"""

# SQL_OUTBOX_REMOVE_FAILED — delete set-aside rows for good (their job will never exist). Only set-aside
# rows: a pending or published row is never removed this way. Answers the ids that landed.
SQL_OUTBOX_REMOVE_FAILED = """
DELETE FROM x_outbox
WHERE id = ANY(%(ids)s::uuid[]) AND published_at IS NULL AND failed_at IS NOT NULL
RETURNING id
"""

# SQL_OUTBOX_PURGE_PUBLISHED — retention: delete at most %(limit)s rows published before %(before)s (epoch
# ms), oldest published first, in ONE short statement (x_outbox_published_idx: partial over published
# rows, so waiting and set-aside rows cost nothing and never go). Answers how many rows went; the caller
# runs it again while a batch comes back full.
SQL_OUTBOX_PURGE_PUBLISHED = """
WITH picked AS (
    SELECT id FROM x_outbox
    WHERE published_at IS NOT NULL AND published_at < to_timestamp(%(before)s / 1000.0)
    ORDER BY published_at
    LIMIT %(limit)s
),
gone AS (
    DELETE FROM x_outbox o USING picked p WHERE o.id = p.id RETURNING 1
)
SELECT count(*) FROM gone
"""

# SQL_OUTBOX_WAKE_PROBE — the probe that proves the relay's LISTEN x_outbox_wake session: sent through
# the pool, it must come back on the session (see drivers/postgres/wake.py).
SQL_OUTBOX_WAKE_PROBE = f"SELECT pg_notify('{OUTBOX_WAKE_CHANNEL}', %(payload)s)"
