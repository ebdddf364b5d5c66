"""Every statement of the SQLite driver's stores — the scheduler's leader lease, the counter rollup its
leader owes (``driver.rollup_counters()``), watermarks and fires, and the backfill ledger — verbatim, one
constant each. The conventions of :mod:`.jobs` hold here too."""

from __future__ import annotations

from ....contracts.series import COUNTER_TIERS
from ...sql.clauses import LEASE_TAKEOVER, RUN_BINS, run_bins_added
from .jobs import RUN_BIN_PARAMS

# -- the leader lease (x_job_scheduler_leases) ------------------------------------------------------

# SQL_LEADER_ACQUIRE — take or renew the lease :name for :holder until :expires (primary key). It lands
# when the row is absent, already this holder's, or expired; a live lease of another holder is left alone
# and the upsert answers no row. A renewal of a live lease keeps its acquired_at; a new term starts it at
# :now. SQLite's one write lock serialises acquirers, so one wins.
SQL_LEADER_ACQUIRE = f"""
INSERT INTO x_job_scheduler_leases AS l (name, holder, acquired_at, expires_at)
VALUES (:name, :holder, :now, :expires)
{LEASE_TAKEOVER}
RETURNING name, holder, acquired_at, expires_at
"""

# SQL_LEADER_RELEASE — hand the lease back (a clean stop); only this holder's row. Answers a row when one
# was released.
SQL_LEADER_RELEASE = "DELETE FROM x_job_scheduler_leases WHERE name = :name AND holder = :holder RETURNING 1"

# SQL_LEADER_CURRENT — the stored lease of :name, live or lapsed (primary key).
SQL_LEADER_CURRENT = "SELECT name, holder, acquired_at, expires_at FROM x_job_scheduler_leases WHERE name = :name"

# -- the counter rollup the leader owes (x_job_counters) -------------------------------------------

# A bucket is past its tier's retention once it ENDED keep ms or more before now: bucket <= now - keep -
# width, one cutoff per tier (:expired_0 …, computed by the caller).
_PAST_RETENTION = " OR ".join(
    f"(c.width_ms = {width} AND c.bucket <= :expired_{i})" for i, (width, _) in enumerate(COUNTER_TIERS)
)

# SQL_ROLLUP_EXPIRED — the rollup's input: every bucket past its tier's retention. The caller places each
# in the narrowest wider tier still retaining it (or drops it), deletes them (SQL_ROLLUP_DELETE) and adds
# the folded sums (SQL_COUNTER_ADD), all in one transaction.
SQL_ROLLUP_EXPIRED = f"""
SELECT c.id, c.job, c.width_ms, c.bucket, c.done, c.retried, c.failed, c.dead, c.duration_ms, {RUN_BINS}
FROM x_job_counters c
WHERE {_PAST_RETENTION}
"""

# SQL_ROLLUP_DELETE — delete the counter rows :ids (a JSON array, primary key).
SQL_ROLLUP_DELETE = "DELETE FROM x_job_counters WHERE id IN (SELECT value FROM json_each(:ids))"

# SQL_COUNTER_ADD — add counts into the bucket (:job, :width, :bucket) (x_job_counters_bucket_uniq).
SQL_COUNTER_ADD = f"""
INSERT INTO x_job_counters (job, width_ms, bucket, done, retried, failed, dead, duration_ms, {RUN_BINS})
VALUES (:job, :width, :bucket, :done, :retried, :failed, :dead, :duration, {RUN_BIN_PARAMS})
ON CONFLICT (job, width_ms, bucket) DO UPDATE
SET done = done + excluded.done, retried = retried + excluded.retried, failed = failed + excluded.failed,
    dead = dead + excluded.dead, duration_ms = duration_ms + excluded.duration_ms, {run_bins_added("")}
"""

# SQL_ROLLUP_WAITS_EXPIRED — the wait bins past their tier's retention (x_job_waits), folded as the counters
# are: deleted (SQL_ROLLUP_WAITS_DELETE) and added into their wider bucket (SQL_WAIT_ADD) in one transaction.
SQL_ROLLUP_WAITS_EXPIRED = f"""
SELECT c.id, c.queue, c.width_ms, c.bucket, c.bin, c.count
FROM x_job_waits c
WHERE {_PAST_RETENTION}
"""

# SQL_ROLLUP_WAITS_DELETE — delete the wait rows :ids (a JSON array, primary key).
SQL_ROLLUP_WAITS_DELETE = "DELETE FROM x_job_waits WHERE id IN (SELECT value FROM json_each(:ids))"

# SQL_WAIT_ADD — add :count into bin :bin of the bucket (:queue, :width, :bucket) (x_job_waits_bucket_uniq).
SQL_WAIT_ADD = """
INSERT INTO x_job_waits (queue, width_ms, bucket, bin, count)
VALUES (:queue, :width, :bucket, :bin, :count)
ON CONFLICT (queue, width_ms, bucket, bin) DO UPDATE SET count = count + excluded.count
"""

# SQL_SAMPLE_QUEUES — the rollup's sample of the queues' depth at :now into the minute :bucket
# (x_job_queue_samples_uniq): per queue the rows waiting (ready, delayed) and the oldest due row's age in ms,
# and the minute's "" marker; the most of each is kept (SQLite's max() of a NULL is NULL: coalesce).
SQL_SAMPLE_QUEUES = """
INSERT INTO x_job_queue_samples (bucket, queue, depth, oldest_age_ms)
SELECT * FROM (
    SELECT :bucket, queue, count(*),
           CAST(round((julianday(:now) - julianday(min(CASE WHEN run_at <= :now THEN run_at END))) * 86400000.0)
                AS INTEGER)
    FROM x_jobs WHERE state IN ('ready', 'delayed') GROUP BY queue
    UNION ALL
    SELECT :bucket, '', 0, NULL
) WHERE true
ON CONFLICT (bucket, queue) DO UPDATE
SET depth = max(depth, excluded.depth),
    oldest_age_ms = coalesce(max(oldest_age_ms, excluded.oldest_age_ms), oldest_age_ms, excluded.oldest_age_ms)
"""

# SQL_FORGET_SAMPLES — drop the depth samples before :before (a week before the rollup's now).
SQL_FORGET_SAMPLES = "DELETE FROM x_job_queue_samples WHERE bucket < :before"

# -- the watermarks (x_job_task_watermarks) --------------------------------------------------------

# SQL_SCHEDULER_ARM — arm the tasks :tasks (a JSON array) that have no watermark at :now; a watermark
# another scheduler armed first is kept (arming is not a fire).
SQL_SCHEDULER_ARM = """
INSERT INTO x_job_task_watermarks (task, watermark, updated_at)
SELECT t.value, :now, :now FROM json_each(:tasks) t WHERE true
ON CONFLICT (task) DO NOTHING
"""

# SQL_SCHEDULER_WATERMARKS — the stored watermarks of :tasks (a JSON array; primary key).
SQL_SCHEDULER_WATERMARKS = """
SELECT task, watermark FROM x_job_task_watermarks WHERE task IN (SELECT value FROM json_each(:tasks))
"""

# SQL_SCHEDULER_MOVE — the fire's fence: move the watermark of :task to :watermark only while it still
# holds :previous (the value the firing scheduler read) and the task is not paused (x_job_paused_tasks).
# Answers the task when it moved; the fire's rows and record follow in the same transaction.
SQL_SCHEDULER_MOVE = """
UPDATE x_job_task_watermarks
SET watermark = :watermark, updated_at = :now
WHERE task = :task AND watermark = :previous
  AND NOT EXISTS (SELECT 1 FROM x_job_paused_tasks p WHERE p.task = :task)
RETURNING task
"""

# SQL_TASK_PAUSED — whether :task is paused (primary key).
SQL_TASK_PAUSED = "SELECT 1 FROM x_job_paused_tasks WHERE task = :task"

# SQL_SCHEDULER_RECORD_FIRE — record the fire of :task's occurrence (x_job_task_fires, one row per task).
SQL_SCHEDULER_RECORD_FIRE = """
INSERT INTO x_job_task_fires (task, occurrence_at, fired_at) VALUES (:task, :occurrence, :now)
ON CONFLICT (task) DO UPDATE SET occurrence_at = excluded.occurrence_at, fired_at = excluded.fired_at
"""

# -- the backfill ledger (x_backfills) -------------------------------------------------------------

BACKFILL_COLUMNS = """id, name, tenant_id, checksum, status, app_version, rows_processed, batches, last_cursor,
       job_id, run_id, error_code, started_at, updated_at, completed_at"""

# SQL_BACKFILL_BEGIN — the ledger row of run :run_id, set running. A retry of the run adopts its own row
# (the unique run_id): started_at, the checksum, the counts and the id are kept, the app version becomes
# this attempt's, an earlier error or completion is cleared. A run with no row inserts one.
SQL_BACKFILL_BEGIN = f"""
INSERT INTO x_backfills AS b (id, name, tenant_id, checksum, status, app_version, rows_processed, batches,
                              last_cursor, job_id, run_id, error_code, started_at, updated_at, completed_at)
VALUES (:id, :name, :tenant_id, :checksum, 'running', :app_version, 0, 0, NULL, :job_id, :run_id, NULL, :now,
        :now, NULL)
ON CONFLICT (run_id) DO UPDATE
SET status = 'running', app_version = excluded.app_version, error_code = NULL, completed_at = NULL,
    updated_at = excluded.updated_at
RETURNING {BACKFILL_COLUMNS}
"""

# SQL_BACKFILL_PROGRESS — a pass's counts and last cursor after a page (primary key); only a running row
# moves. Answers the row id when it landed.
SQL_BACKFILL_PROGRESS = """
UPDATE x_backfills SET rows_processed = :rows, batches = :batches, last_cursor = :cursor, updated_at = :now
WHERE id = :id AND status = 'running'
RETURNING id
"""

# SQL_BACKFILL_FINISH — settle a pass completed (stamping completed_at) or failed (keeping its error
# code); a NULL count keeps the stored one. Answers the row id.
SQL_BACKFILL_FINISH = """
UPDATE x_backfills
SET status = :status, rows_processed = coalesce(:rows, rows_processed), batches = coalesce(:batches, batches),
    error_code = CASE WHEN :status = 'failed' THEN :error_code END,
    completed_at = CASE WHEN :status = 'completed' THEN :now END, updated_at = :now
WHERE id = :id
RETURNING id
"""

# SQL_BACKFILL_COMPLETED — the newest completed pass of :name under :tenant_id (NULL: the cross-tenant
# pass), on x_backfills_name_idx — what makes a re-run skip.
SQL_BACKFILL_COMPLETED = f"""
SELECT {BACKFILL_COLUMNS}
FROM x_backfills
WHERE name = :name AND tenant_id IS :tenant_id AND status = 'completed'
ORDER BY started_at DESC, id DESC
LIMIT 1
"""

# SQL_BACKFILL_LIST — ledger rows newest first, of one name and/or status when given, at most :limit.
SQL_BACKFILL_LIST = f"""
SELECT {BACKFILL_COLUMNS}
FROM x_backfills
WHERE (:name IS NULL OR name = :name) AND (:status IS NULL OR status = :status)
ORDER BY started_at DESC, id DESC
LIMIT :limit
"""
