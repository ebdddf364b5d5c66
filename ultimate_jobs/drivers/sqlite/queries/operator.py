"""Every statement of the SQLite driver's operator surface (``driver.operator``), verbatim, one constant
each. The conventions of :mod:`.jobs` hold here too. An optional filter is ``(:x IS NULL OR col = :x)``.
An operation of several statements (a requeue: read, check, move, cut its steps) runs in one
``BEGIN IMMEDIATE`` transaction, so the row a refusal names is the row it read."""

from __future__ import annotations

from ....contracts.series import COUNTER_TIERS
from ...sql.clauses import RUN_BIN_SUMS, RUN_BINS
from .jobs import FINISHED_STATES_SQL, JOB_COLUMNS, LIVE_STATES_SQL, RETURNING_JOB_COLUMNS, STEP_COLUMNS

# -- reads -----------------------------------------------------------------------------------------

# SQL_GET_JOB — one row by id (primary key).
SQL_GET_JOB = f"SELECT {JOB_COLUMNS} FROM x_jobs j WHERE j.id = :id"

# SQL_JOB_STEPS — a job's persisted steps in seq order (x_job_steps_job_seq_idx).
SQL_JOB_STEPS = f"SELECT {STEP_COLUMNS} FROM x_job_steps s WHERE s.job_id = :id ORDER BY s.seq, s.id"

# The filters list() shares between its two directions. The id prefix is an id range [:id_low, :id_high]
# the caller computed, so it rides the primary key. The id suffix (:id_tail, the hex digits a short id
# ends with) has no index: with it, the walk reads every row the other filters leave. The created range is
# half-open.
_LIST_FILTERS = """(:queue IS NULL OR j.queue = :queue)
  AND (:name IS NULL OR j.name = :name)
  AND (:state IS NULL OR j.state = :state)
  AND (:tenant_id IS NULL OR j.tenant_id = :tenant_id)
  AND (:id_low IS NULL OR j.id BETWEEN :id_low AND :id_high)
  AND (:id_tail IS NULL OR substr(j.id, -length(:id_tail)) = :id_tail)
  AND (:idempotency_key IS NULL OR j.idempotency_key = :idempotency_key)
  AND (:created_from IS NULL OR j.created_at >= :created_from)
  AND (:created_to IS NULL OR j.created_at < :created_to)"""

# SQL_LIST_JOBS — one page, newest first by (created_at, id); with a cursor, only rows strictly older than
# it. Walks x_jobs_created_idx, or x_jobs_state_queue_idx when a state is given.
SQL_LIST_JOBS = f"""
SELECT {JOB_COLUMNS}
FROM x_jobs j
WHERE {_LIST_FILTERS}
  AND (:cursor_at IS NULL OR (j.created_at, j.id) < (:cursor_at, :cursor_id))
ORDER BY j.created_at DESC, j.id DESC
LIMIT :limit
"""

# SQL_LIST_JOBS_OLDEST — one page, oldest first by (created_at, id); with a cursor, only rows strictly newer
# than it. The same filters and indexes as SQL_LIST_JOBS, walked the other way.
SQL_LIST_JOBS_OLDEST = f"""
SELECT {JOB_COLUMNS}
FROM x_jobs j
WHERE {_LIST_FILTERS}
  AND (:cursor_at IS NULL OR (j.created_at, j.id) > (:cursor_at, :cursor_id))
ORDER BY j.created_at, j.id
LIMIT :limit
"""

# Each sort column of the window (ultimate_jobs.contracts.ordering), as the window selects it. SQLite compares
# text by its bytes (BINARY): by code point, as every driver orders it.
_SORTED = {
    "run_at": "j.run_at",
    "finished": "j.finished_at",
    "attempts": "j.attempts",
    "name": "j.name",
    "queue": "j.queue",
}


def _sorted_page(column: str, descending: bool) -> str:
    """One page sorted by ``column`` within the window: the :window newest rows the filters match (one walk
    of x_jobs_created_idx or x_jobs_state_queue_idx, so the rows read do not grow with the table), sorted,
    ties by creation then id in the same direction; with a cursor, only rows strictly after it. Answers each
    row with ``cut``: whether more rows match than the window holds. Sorted by finished, live rows (no
    finish) are left out."""
    op, way = ("<", " DESC") if descending else (">", "")
    finished = "\n      AND j.finished_at IS NOT NULL" if column == "finished" else ""
    return f"""
WITH w AS MATERIALIZED (
    SELECT j.id, j.created_at, {_SORTED[column]} AS v
    FROM x_jobs j
    WHERE {_LIST_FILTERS}{finished}
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT :window + 1
),
kept AS (
    SELECT w.* FROM w ORDER BY w.created_at DESC, w.id DESC LIMIT :window
)
SELECT {JOB_COLUMNS}, (SELECT count(*) FROM w) > :window AS cut
FROM kept k JOIN x_jobs j ON j.id = k.id
WHERE :cursor_at IS NULL OR (k.v, k.created_at, k.id) {op} (:cursor_value, :cursor_at, :cursor_id)
ORDER BY k.v{way}, k.created_at{way}, k.id{way}
LIMIT :limit
"""


# SQL_LIST_JOBS_SORTED — a page of each sorted order but creation's (keyed "run_at", "-run_at", …), from
# _sorted_page: a window of the newest matching rows, sorted. A page before a cursor walks the opposite
# order's statement and is reversed by the caller.
SQL_LIST_JOBS_SORTED = {
    f"{'-' if descending else ''}{column}": _sorted_page(column, descending)
    for column in _SORTED
    for descending in (False, True)
}

# SQL_COUNT_JOBS — how many rows the filters match, counting at most :cap + 1 of them (the walk stops there:
# an answer over :cap means "more"). :finished_only leaves live rows out (a list sorted by finished holds
# finished rows only).
SQL_COUNT_JOBS = f"""
SELECT count(*) FROM (
    SELECT 1 FROM x_jobs j
    WHERE {_LIST_FILTERS}
      AND (NOT :finished_only OR j.finished_at IS NOT NULL)
    LIMIT :cap + 1
)
"""

# -- single-row operations ---------------------------------------------------------------------------

# SQL_JOB_STATE — the state, key and queue of one row (primary key): what a single-row operation judges
# its refusal on, read in the operation's own write transaction.
SQL_JOB_STATE = "SELECT state, idempotency_key, queue, run_at FROM x_jobs WHERE id = :id"

# SQL_DELETE_JOB — delete one row that is not running (primary key); its steps go with SQL_DELETE_STEPS.
SQL_DELETE_JOB = "DELETE FROM x_jobs WHERE id = :id AND state <> 'running' RETURNING id"

# SQL_LIVE_HOLDER — another live row holding a job's (name, tenant, idempotency key)
# (x_jobs_name_tenant_idempotency_live_idx). Answers the holder's id.
SQL_LIVE_HOLDER = f"""
SELECT h.id
FROM x_jobs t JOIN x_jobs h
  ON h.name = t.name AND coalesce(h.tenant_id, '') = coalesce(t.tenant_id, '')
 AND h.idempotency_key = t.idempotency_key
WHERE t.id = :id AND h.state IN {LIVE_STATES_SQL} AND h.id <> t.id
LIMIT 1
"""

# SQL_STEP_SEQ — the seq of a job's step :from_step (x_job_steps_job_name_uniq).
SQL_STEP_SEQ = "SELECT seq FROM x_job_steps WHERE job_id = :id AND name = :from_step"

# SQL_JOB_REQUEUE — re-queue ONE finished row: ready, attempts 0, due now; progress, worker and claim cleared.
# The caller checked in the same transaction that it is finished and that no live row holds its key.
SQL_JOB_REQUEUE = f"""
UPDATE x_jobs AS j
SET state = 'ready', attempts = 0, run_at = :now, updated_at = :now, finished_at = NULL, progress = NULL,
    worker_id = NULL, claim = NULL, lease_until = NULL
WHERE j.id = :id AND j.state IN {FINISHED_STATES_SQL}
RETURNING {RETURNING_JOB_COLUMNS}
"""

# SQL_CUT_STEPS — a requeue from a step: delete that step and every later one by seq.
SQL_CUT_STEPS = "DELETE FROM x_job_steps WHERE job_id = :id AND seq >= :seq"

# SQL_CANCEL_JOB — stop one LIVE row: cancelled, finished now, its claim cleared, so the running body's
# settles, heartbeats and steps (all fenced on the claim) land nowhere; worker_id keeps the worker of its
# last attempt. A finished row answers no row.
SQL_CANCEL_JOB = f"""
UPDATE x_jobs AS j
SET state = 'cancelled', updated_at = :now, finished_at = :now, claim = NULL,
    lease_until = NULL, last_error = :error, last_code = 'X_JOB_CANCELLED'
WHERE j.id = :id AND j.state IN {LIVE_STATES_SQL}
RETURNING {RETURNING_JOB_COLUMNS}
"""

# SQL_JOB_PROMOTE — make one row waiting on its run_at (delayed, or ready and backing off) due now. A row
# that is not waiting answers no row.
SQL_JOB_PROMOTE = f"""
UPDATE x_jobs AS j
SET state = 'ready', run_at = :now, updated_at = :now
WHERE j.id = :id AND j.state IN ('delayed', 'ready') AND j.run_at > :now
RETURNING {RETURNING_JOB_COLUMNS}
"""

# -- bulk ------------------------------------------------------------------------------------------

_BULK_FILTERS = """j.state = :state
      AND (:queue IS NULL OR j.queue = :queue)
      AND (:name IS NULL OR j.name = :name)
      AND (:tenant_id IS NULL OR j.tenant_id = :tenant_id)"""

# SQL_REQUEUE_MANY_PICK — the candidates of a bulk requeue: of the rows of one finished state matching the
# filter whose key no live row holds, each key's OLDEST row (x_jobs_state_queue_idx). Answers their ids,
# oldest first; the caller moves the first :max_rows (SQL_REQUEUE_IDS) and counts the rest as remaining.
SQL_REQUEUE_MANY_PICK = f"""
SELECT id FROM (
    SELECT j.id, j.created_at,
           row_number() OVER (PARTITION BY j.name, coalesce(j.tenant_id, ''), j.idempotency_key
                              ORDER BY j.created_at, j.id) AS rn
    FROM x_jobs j
    WHERE {_BULK_FILTERS}
      AND NOT EXISTS (
          SELECT 1 FROM x_jobs h
          WHERE h.name = j.name AND coalesce(h.tenant_id, '') = coalesce(j.tenant_id, '')
            AND h.idempotency_key = j.idempotency_key AND h.state IN {LIVE_STATES_SQL}
      )
)
WHERE rn = 1
ORDER BY created_at, id
"""

# SQL_REQUEUE_IDS — re-queue the finished rows :ids (a JSON array, primary key) of state :state. Answers
# the queues of the rows moved.
SQL_REQUEUE_IDS = """
UPDATE x_jobs AS j
SET state = 'ready', attempts = 0, run_at = :now, updated_at = :now, finished_at = NULL, progress = NULL,
    worker_id = NULL, claim = NULL, lease_until = NULL
WHERE j.id IN (SELECT value FROM json_each(:ids)) AND j.state = :state
RETURNING queue
"""

# SQL_BULK_PICK — the rows of one state matching a bulk filter, oldest first (x_jobs_state_queue_idx);
# with :waiting, only rows still waiting on their run_at (a bulk promote).
SQL_BULK_PICK = f"""
SELECT j.id
FROM x_jobs j
WHERE {_BULK_FILTERS}
  AND (:waiting = 0 OR j.run_at > :now)
ORDER BY j.created_at, j.id
"""

# SQL_DELETE_IDS — delete the rows :ids (a JSON array) still in state :state and never a running one;
# answers the ids that went (their steps go with SQL_DELETE_STEPS).
SQL_DELETE_IDS = """
DELETE FROM x_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = :state AND state <> 'running'
RETURNING id
"""

# SQL_PROMOTE_IDS — make the rows :ids (a JSON array) of state :state that still wait on their run_at due
# now. Answers the queues of the rows moved.
SQL_PROMOTE_IDS = """
UPDATE x_jobs AS j
SET state = 'ready', run_at = :now, updated_at = :now
WHERE j.id IN (SELECT value FROM json_each(:ids)) AND j.state = :state AND j.run_at > :now
RETURNING queue
"""

# -- pauses ----------------------------------------------------------------------------------------

# SQL_PAUSE_QUEUE — a paused queue is a row the claim reads (primary key); pausing twice is a no-op.
SQL_PAUSE_QUEUE = "INSERT INTO x_job_paused_queues (queue, paused_at) VALUES (:queue, :now) ON CONFLICT DO NOTHING"

# SQL_RESUME_QUEUE — drop the pause row.
SQL_RESUME_QUEUE = "DELETE FROM x_job_paused_queues WHERE queue = :queue"

# SQL_PAUSED_QUEUES — every paused queue, in code-point order (SQLite's BINARY collation).
SQL_PAUSED_QUEUES = "SELECT queue FROM x_job_paused_queues ORDER BY queue"

# SQL_PAUSE_TASK — a paused task is a row the scheduler reads when it is due (primary key).
SQL_PAUSE_TASK = "INSERT INTO x_job_paused_tasks (task, paused_at) VALUES (:task, :now) ON CONFLICT DO NOTHING"

# SQL_RESUME_TASK — drop the pause row; its own catch-up decides what the task missed.
SQL_RESUME_TASK = "DELETE FROM x_job_paused_tasks WHERE task = :task"

# SQL_PAUSED_TASKS — every paused task, in code-point order.
SQL_PAUSED_TASKS = "SELECT task FROM x_job_paused_tasks ORDER BY task"

# -- workers ---------------------------------------------------------------------------------------

# SQL_EXPIRE_WORKERS — drop registry rows whose last heartbeat is :cutoff or older.
SQL_EXPIRE_WORKERS = "DELETE FROM x_workers WHERE heartbeat_at <= :cutoff"

# SQL_WORKERS — every live worker (heartbeat after :cutoff), oldest first.
SQL_WORKERS = """
SELECT id, host, pid, started_at, queues, slots, in_flight, heartbeat_at
FROM x_workers
WHERE heartbeat_at > :cutoff
ORDER BY started_at, id
"""

# -- counters --------------------------------------------------------------------------------------

# A bucket "ends after :since" when bucket + width > since, i.e. bucket > since - width: one cutoff per
# tier width (COUNTER_TIERS), :after_0 … computed by the caller.
_ENDS_AFTER = " OR ".join(
    f"(c.width_ms = {width} AND c.bucket > :after_{i})" for i, (width, _) in enumerate(COUNTER_TIERS)
)

# SQL_COUNTERS — one job's buckets of every tier that end after the caller's instant, oldest first
# (x_job_counters_bucket_uniq leads with job).
SQL_COUNTERS = f"""
SELECT c.job, c.bucket, c.width_ms, c.done, c.retried, c.failed, c.dead, c.duration_ms, {RUN_BINS}
FROM x_job_counters c
WHERE c.job = :job AND ({_ENDS_AFTER})
ORDER BY c.bucket, c.width_ms
"""

# SQL_COUNTER_TOTALS — per job, the sum of every bucket that ends after the caller's instant, by job name
# in code-point order.
SQL_COUNTER_TOTALS = f"""
SELECT c.job, sum(c.done), sum(c.retried), sum(c.failed), sum(c.dead), sum(c.duration_ms)
FROM x_job_counters c
WHERE {_ENDS_AFTER}
GROUP BY c.job
ORDER BY c.job
"""

# The epoch-ms start of the :width-wide bucket holding counter bucket ``c`` (its column is the instant's text).
WIDER_BUCKET = "(CAST(round((julianday(c.bucket) - 2440587.5) * 86400000.0) AS INTEGER) / :width) * :width"

# SQL_COUNTER_SERIES — every job's buckets that end after the caller's instant, summed into buckets of :width
# ms, oldest first: at most one row per bucket of that width, whatever the number of jobs.
SQL_COUNTER_SERIES = f"""
SELECT {WIDER_BUCKET} AS at, sum(c.done), sum(c.retried), sum(c.failed), sum(c.dead), sum(c.duration_ms),
       {RUN_BIN_SUMS}
FROM x_job_counters c
WHERE {_ENDS_AFTER}
GROUP BY 1
ORDER BY 1
"""

# SQL_WAIT_SERIES — every queue's wait bins in the buckets that end after the caller's instant, summed into
# buckets of :width ms: a row per queue, bucket and bin that counted something, oldest first.
SQL_WAIT_SERIES = f"""
SELECT c.queue, {WIDER_BUCKET} AS at, c.bin, sum(c.count)
FROM x_job_waits c
WHERE {_ENDS_AFTER}
GROUP BY 1, 2, 3
ORDER BY 2, 1, 3
"""

# SQL_QUEUE_SAMPLES — the queues' depth samples from :since on, gathered into buckets of :width ms: per bucket
# and queue the most waiting and the oldest age any sample saw ("" marks a sampled bucket).
SQL_QUEUE_SAMPLES = f"""
SELECT c.queue, {WIDER_BUCKET} AS at, max(c.depth), max(c.oldest_age_ms)
FROM x_job_queue_samples c
WHERE c.bucket >= :since
GROUP BY 1, 2
ORDER BY 2, 1
"""

# -- task fires ------------------------------------------------------------------------------------

# SQL_TASK_FIRES — per task, the last occurrence that dispatched, by task name, at most :limit rows.
SQL_TASK_FIRES = "SELECT task, occurrence_at, fired_at FROM x_job_task_fires ORDER BY task LIMIT :limit"
