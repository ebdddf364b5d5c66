"""Every statement of the operator surface (``driver.operator``), verbatim, one constant each.

The conventions of :mod:`.jobs` hold here too: named parameters, the caller's clock injected as epoch
ms (``to_timestamp(%(now)s / 1000.0)``; no statement compares with the server's ``now()``), times
read back as epoch ms. An optional filter is ``(%(x)s::text IS NULL OR col = %(x)s)``: Django binds
parameters client-side, so the planner sees the literal and folds the unused arm away. A statement
that makes rows due announces each queue with ``pg_notify('x_jobs_wake', queue)`` inside itself.
"""

from __future__ import annotations

from ...sql.clauses import RUN_BIN_SUMS, RUN_BINS
from .jobs import JOB_COLUMNS, LIVE_STATES_SQL, STEP_COLUMNS, WAKE_CHANNEL

FINISHED_STATES_SQL = "('done', 'failed', 'dead', 'cancelled')"

# -- reads -----------------------------------------------------------------------------------------

# SQL_GET_JOB — one row by id (primary key).
SQL_GET_JOB = f"""
SELECT {JOB_COLUMNS}
FROM x_jobs j
WHERE j.id = %(id)s
"""

# SQL_JOB_STEPS — a job's persisted steps in seq order (x_job_steps_job_seq_idx).
SQL_JOB_STEPS = f"""
SELECT {STEP_COLUMNS}
FROM x_job_steps s
WHERE s.job_id = %(id)s
ORDER BY s.seq, s.id
"""

# The filters every list statement shares. The id prefix is a uuid range [%(id_low)s, %(id_high)s] the
# caller computed, so it rides the primary key. The id suffix (%(id_tail)s, the hex digits a short id ends
# with) has no index: with it, the walk reads every row the other filters leave (an operator's lookup of one
# short id, not a hot path). The created range is half-open. The idempotency key is an exact match with no
# index of its own (x_jobs_name_tenant_idempotency_live_idx covers live rows only): the created or state
# index bounds the walk.
_LIST_FILTERS = """(%(queue)s::text IS NULL OR j.queue = %(queue)s)
  AND (%(name)s::text IS NULL OR j.name = %(name)s)
  AND (%(state)s::text IS NULL OR j.state = %(state)s)
  AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
  AND (%(id_low)s::uuid IS NULL OR j.id BETWEEN %(id_low)s::uuid AND %(id_high)s::uuid)
  AND (%(id_tail)s::text IS NULL OR right(replace(j.id::text, '-', ''), length(%(id_tail)s)) = %(id_tail)s)
  AND (%(idempotency_key)s::text IS NULL OR j.idempotency_key = %(idempotency_key)s)
  AND (%(created_from)s::bigint IS NULL OR j.created_at >= to_timestamp(%(created_from)s / 1000.0))
  AND (%(created_to)s::bigint IS NULL OR j.created_at < to_timestamp(%(created_to)s / 1000.0))"""

# SQL_LIST_JOBS — one page, newest first by (created_at, id); with a cursor, only rows strictly older
# than it. Walks x_jobs_created_idx (created_at DESC, id DESC) in its own order, or x_jobs_state_queue_idx
# when a state is given.
SQL_LIST_JOBS = f"""
SELECT {JOB_COLUMNS}
FROM x_jobs j
WHERE {_LIST_FILTERS}
  AND (%(cursor_at)s::bigint IS NULL
       OR (j.created_at, j.id) < (to_timestamp(%(cursor_at)s / 1000.0), %(cursor_id)s::uuid))
ORDER BY j.created_at DESC, j.id DESC
LIMIT %(limit)s
"""

# SQL_LIST_JOBS_OLDEST — one page, oldest first by (created_at, id); with a cursor, only rows strictly
# newer than it. The same filters and indexes as SQL_LIST_JOBS, walked the other way.
SQL_LIST_JOBS_OLDEST = f"""
SELECT {JOB_COLUMNS}
FROM x_jobs j
WHERE {_LIST_FILTERS}
  AND (%(cursor_at)s::bigint IS NULL
       OR (j.created_at, j.id) > (to_timestamp(%(cursor_at)s / 1000.0), %(cursor_id)s::uuid))
ORDER BY j.created_at, j.id
LIMIT %(limit)s
"""

# Each sort column of the window (ultimate_jobs.contracts.ordering): its value as the window selects it
# (text by code point, as every driver orders it), and the cursor's value as it compares with that.
_SORTED = {
    "run_at": ("j.run_at", "to_timestamp(%(cursor_value)s / 1000.0)"),
    "finished": ("j.finished_at", "to_timestamp(%(cursor_value)s / 1000.0)"),
    "attempts": ("j.attempts", "%(cursor_value)s::int"),
    "name": ('j.name COLLATE "C"', '%(cursor_value)s::text COLLATE "C"'),
    "queue": ('j.queue COLLATE "C"', '%(cursor_value)s::text COLLATE "C"'),
}


def _sorted_page(column: str, descending: bool) -> str:
    """One page sorted by ``column`` within the window: the %(window)s newest rows the filters match (one
    walk of x_jobs_created_idx or x_jobs_state_queue_idx, as SQL_LIST_JOBS walks it, so the rows read do
    not grow with the table), sorted in memory, ties by creation then id in the same direction; with a
    cursor, only rows strictly after it. Answers each row with ``cut``: whether more rows match than the
    window holds. Sorted by finished, live rows (no finish) are left out."""
    value, cursor = _SORTED[column]
    op, way = ("<", " DESC") if descending else (">", "")
    finished = "\n      AND j.finished_at IS NOT NULL" if column == "finished" else ""
    return f"""
WITH w AS MATERIALIZED (
    SELECT j.id, j.created_at, {value} AS v
    FROM x_jobs j
    WHERE {_LIST_FILTERS}{finished}
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT %(window)s + 1
),
kept AS (
    SELECT w.* FROM w ORDER BY w.created_at DESC, w.id DESC LIMIT %(window)s
)
SELECT {JOB_COLUMNS}, (SELECT count(*) FROM w) > %(window)s AS cut
FROM kept k JOIN x_jobs j ON j.id = k.id
WHERE %(cursor_at)s::bigint IS NULL
   OR (k.v, k.created_at, k.id) {op} ({cursor}, to_timestamp(%(cursor_at)s / 1000.0), %(cursor_id)s::uuid)
ORDER BY k.v{way}, k.created_at{way}, k.id{way}
LIMIT %(limit)s
"""


# SQL_LIST_JOBS_SORTED — a page of each sorted order but creation's (keyed "run_at", "-run_at", …), from
# _sorted_page: a window of the newest matching rows, sorted. A page before a cursor walks the opposite
# order's statement and is reversed by the caller.
SQL_LIST_JOBS_SORTED = {
    f"{'-' if descending else ''}{column}": _sorted_page(column, descending)
    for column in _SORTED
    for descending in (False, True)
}

# SQL_COUNT_JOBS — how many rows the filters match, counting at most %(cap)s + 1 of them (the walk stops
# there: an answer over %(cap)s means "more"). %(finished_only)s leaves live rows out (a list sorted by
# finished holds finished rows only).
SQL_COUNT_JOBS = f"""
SELECT count(*) FROM (
    SELECT 1 FROM x_jobs j
    WHERE {_LIST_FILTERS}
      AND (NOT %(finished_only)s OR j.finished_at IS NOT NULL)
    LIMIT %(cap)s + 1
) counted
"""

# SQL_ESTIMATE_JOBS — the planner's estimate of the rows the filters match, from the table's statistics
# (EXPLAIN plans the statement and runs nothing: it reads no row). Answers the plan as JSON; the top node's
# "Plan Rows" is the estimate.
SQL_ESTIMATE_JOBS = f"""
EXPLAIN (FORMAT JSON)
SELECT 1 FROM x_jobs j
WHERE {_LIST_FILTERS}
  AND (NOT %(finished_only)s OR j.finished_at IS NOT NULL)
"""

# -- single-row operations ---------------------------------------------------------------------------

# SQL_REMOVE_JOB — delete one job and its steps in ONE statement (x_job_steps has no FK; its rows go
# through x_job_steps_job_seq_idx). The row is locked first, so the state the refusal is judged on is
# the state the delete saw: a running row is left alone. Answers (state, deleted) — no row when no
# job has that id; deleted = 0 when it is running.
SQL_REMOVE_JOB = """
WITH target AS (
    SELECT j.id, j.state FROM x_jobs j WHERE j.id = %(id)s FOR UPDATE
),
gone AS (
    DELETE FROM x_jobs j USING target t
    WHERE j.id = t.id AND t.state <> 'running'
    RETURNING j.id
),
steps AS (
    DELETE FROM x_job_steps s USING gone g WHERE s.job_id = g.id
)
SELECT t.state, (SELECT count(*) FROM gone) FROM target t
"""

# SQL_JOB_REQUEUE — re-queue ONE finished row (done, failed, dead, cancelled) in ONE statement: ready,
# attempts 0, due now, progress and worker cleared; with %(from_step)s, that step and every later one by seq are
# deleted in the same statement. Moves nothing when the row is live, when a live row holds its key
# (x_jobs_name_tenant_idempotency_live_idx), or when %(from_step)s names no step of it. A live row
# that commits the key after this snapshot makes the update raise a unique violation on that index,
# which the caller translates. Announces the queue. Answers (state, idempotency_key, holder id,
# step found, notified, the moved row's JOB_COLUMNS or NULLs) — no row when no job has that id.
SQL_JOB_REQUEUE = f"""
WITH target AS (
    SELECT j.id, j.state, j.name, j.tenant_id, j.idempotency_key FROM x_jobs j WHERE j.id = %(id)s FOR UPDATE
),
holder AS (
    SELECT h.id
    FROM x_jobs h JOIN target t
      ON h.name = t.name AND coalesce(h.tenant_id, '') = coalesce(t.tenant_id, '')
     AND h.idempotency_key = t.idempotency_key
    WHERE h.state IN {LIVE_STATES_SQL} AND h.id <> t.id
    LIMIT 1
),
cut AS (
    SELECT s.seq FROM x_job_steps s JOIN target t ON s.job_id = t.id WHERE s.name = %(from_step)s
),
moved AS (
    UPDATE x_jobs j
    SET state = 'ready', attempts = 0, run_at = to_timestamp(%(now)s / 1000.0),
        updated_at = to_timestamp(%(now)s / 1000.0), finished_at = NULL, progress = NULL,
        worker_id = NULL, claim = NULL, lease_until = NULL
    FROM target t
    WHERE j.id = t.id AND t.state IN {FINISHED_STATES_SQL}
      AND NOT EXISTS (SELECT 1 FROM holder)
      AND (%(from_step)s::text IS NULL OR EXISTS (SELECT 1 FROM cut))
    RETURNING {JOB_COLUMNS}
),
dropped AS (
    DELETE FROM x_job_steps s USING moved m, cut c WHERE s.job_id = m.id::uuid AND s.seq >= c.seq
),
woke AS (
    SELECT pg_notify('{WAKE_CHANNEL}', m.queue) FROM moved m
)
SELECT t.state, t.idempotency_key, (SELECT h.id FROM holder h), EXISTS (SELECT 1 FROM cut),
       (SELECT count(*) FROM woke), m.*
FROM target t LEFT JOIN moved m ON true
"""

# SQL_LIVE_HOLDER — the live row holding a job's key (x_jobs_name_tenant_idempotency_live_idx), read
# after SQL_JOB_REQUEUE lost a race to a concurrent enqueue. Answers (holder id, idempotency key).
SQL_LIVE_HOLDER = f"""
SELECT h.id, t.idempotency_key
FROM x_jobs t JOIN x_jobs h
  ON h.name = t.name AND coalesce(h.tenant_id, '') = coalesce(t.tenant_id, '')
 AND h.idempotency_key = t.idempotency_key
WHERE t.id = %(id)s AND h.state IN {LIVE_STATES_SQL} AND h.id <> t.id
LIMIT 1
"""

# SQL_CANCEL_JOB — stop one LIVE row (ready, delayed, running, suspended): cancelled, finished now,
# its claim cleared, so the running body's settles, heartbeats and steps (all fenced on the claim)
# land nowhere; worker_id keeps the worker of its last attempt. A finished row is left exactly as it
# ended and answers no row. Primary key.
SQL_CANCEL_JOB = f"""
UPDATE x_jobs j
SET state = 'cancelled', updated_at = to_timestamp(%(now)s / 1000.0), finished_at = to_timestamp(%(now)s / 1000.0),
    claim = NULL, lease_until = NULL, last_error = %(error)s, last_code = 'X_JOB_CANCELLED'
WHERE j.id = %(id)s AND j.state IN {LIVE_STATES_SQL}
RETURNING {JOB_COLUMNS}
"""

# SQL_JOB_PROMOTE — make one row waiting on its run_at (delayed, or ready and backing off) due now,
# and announce its queue. A row that is not waiting moves nothing. Answers (state, notified, the moved
# row's JOB_COLUMNS or NULLs) — no row when no job has that id. Primary key.
SQL_JOB_PROMOTE = f"""
WITH target AS (
    SELECT j.id, j.state FROM x_jobs j WHERE j.id = %(id)s FOR UPDATE
),
moved AS (
    UPDATE x_jobs j
    SET state = 'ready', run_at = to_timestamp(%(now)s / 1000.0), updated_at = to_timestamp(%(now)s / 1000.0)
    FROM target t
    WHERE j.id = t.id AND t.state IN ('delayed', 'ready') AND j.run_at > to_timestamp(%(now)s / 1000.0)
    RETURNING {JOB_COLUMNS}
),
woke AS (
    SELECT pg_notify('{WAKE_CHANNEL}', m.queue) FROM moved m
)
SELECT t.state, (SELECT count(*) FROM woke), m.*
FROM target t LEFT JOIN moved m ON true
"""

# -- bulk ------------------------------------------------------------------------------------------

# SQL_REQUEUE_MANY — re-queue up to %(max_rows)s finished rows of one state in ONE statement. Of the
# rows matching the filter whose key no live row holds (x_jobs_name_tenant_idempotency_live_idx), each
# key's OLDEST row is a candidate (DISTINCT ON the key); the oldest %(max_rows)s candidates move. A
# held row is never a candidate, so it is neither moved nor counted. Rows come through
# x_jobs_state_queue_idx. A live row committing one of the keys after this snapshot raises a unique
# violation on the live index; the caller retries. Announces each queue that got rows. Answers
# (affected, candidates): remaining = candidates - affected.
SQL_REQUEUE_MANY = f"""
WITH candidates AS MATERIALIZED (
    SELECT DISTINCT ON (j.name, coalesce(j.tenant_id, ''), j.idempotency_key) j.id, j.created_at
    FROM x_jobs j
    WHERE j.state = %(state)s
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (%(name)s::text IS NULL OR j.name = %(name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
      AND NOT EXISTS (
          SELECT 1 FROM x_jobs h
          WHERE h.name = j.name AND coalesce(h.tenant_id, '') = coalesce(j.tenant_id, '')
            AND h.idempotency_key = j.idempotency_key AND h.state IN {LIVE_STATES_SQL}
      )
    ORDER BY j.name, coalesce(j.tenant_id, ''), j.idempotency_key, j.created_at, j.id
),
picked AS (
    SELECT c.id FROM candidates c ORDER BY c.created_at, c.id LIMIT %(max_rows)s
),
moved AS (
    UPDATE x_jobs j
    SET state = 'ready', attempts = 0, run_at = to_timestamp(%(now)s / 1000.0),
        updated_at = to_timestamp(%(now)s / 1000.0), finished_at = NULL, progress = NULL,
        worker_id = NULL, claim = NULL, lease_until = NULL
    FROM picked p
    WHERE j.id = p.id AND j.state = %(state)s
    RETURNING j.queue
),
woke AS (
    SELECT pg_notify('{WAKE_CHANNEL}', q.queue) FROM (SELECT DISTINCT m.queue FROM moved m) q
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM candidates), (SELECT count(*) FROM woke)
"""

# SQL_REMOVE_MANY — delete up to %(max_rows)s rows of one (non-running) state, oldest first, and their
# steps, in ONE statement (x_jobs_state_queue_idx; x_job_steps_job_seq_idx). The delete re-checks the
# state, so a row that started running meanwhile stays. Answers (affected, matching): remaining =
# matching - affected.
SQL_REMOVE_MANY = """
WITH matching AS MATERIALIZED (
    SELECT j.id, j.created_at
    FROM x_jobs j
    WHERE j.state = %(state)s
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (%(name)s::text IS NULL OR j.name = %(name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
),
picked AS (
    SELECT m.id FROM matching m ORDER BY m.created_at, m.id LIMIT %(max_rows)s
),
gone AS (
    DELETE FROM x_jobs j USING picked p
    WHERE j.id = p.id AND j.state = %(state)s AND j.state <> 'running'
    RETURNING j.id
),
steps AS (
    DELETE FROM x_job_steps s USING gone g WHERE s.job_id = g.id
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM matching)
"""

# SQL_PROMOTE_MANY — make up to %(max_rows)s rows of one state (delayed or ready) that still wait on
# their run_at due now, oldest first, in ONE statement (x_jobs_state_queue_idx), and announce each
# queue. Answers (affected, waiting): remaining = waiting - affected.
SQL_PROMOTE_MANY = f"""
WITH waiting AS MATERIALIZED (
    SELECT j.id, j.created_at
    FROM x_jobs j
    WHERE j.state = %(state)s
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (%(name)s::text IS NULL OR j.name = %(name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
      AND j.run_at > to_timestamp(%(now)s / 1000.0)
),
picked AS (
    SELECT w.id FROM waiting w ORDER BY w.created_at, w.id LIMIT %(max_rows)s
),
moved AS (
    UPDATE x_jobs j
    SET state = 'ready', run_at = to_timestamp(%(now)s / 1000.0), updated_at = to_timestamp(%(now)s / 1000.0)
    FROM picked p
    WHERE j.id = p.id AND j.state = %(state)s AND j.run_at > to_timestamp(%(now)s / 1000.0)
    RETURNING j.queue
),
woke AS (
    SELECT pg_notify('{WAKE_CHANNEL}', q.queue) FROM (SELECT DISTINCT m.queue FROM moved m) q
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM waiting), (SELECT count(*) FROM woke)
"""

# -- pauses ----------------------------------------------------------------------------------------

# SQL_PAUSE_QUEUE — a paused queue is a row SQL_CLAIM reads (primary key); pausing twice is a no-op.
SQL_PAUSE_QUEUE = """
INSERT INTO x_job_paused_queues (queue, paused_at) VALUES (%(queue)s, to_timestamp(%(now)s / 1000.0))
ON CONFLICT (queue) DO NOTHING
"""

# SQL_RESUME_QUEUE — drop the pause row and announce the queue (its rows may be due); resuming a queue
# that was never paused only announces it.
SQL_RESUME_QUEUE = f"""
WITH resumed AS (
    DELETE FROM x_job_paused_queues WHERE queue = %(queue)s
)
SELECT pg_notify('{WAKE_CHANNEL}', %(queue)s)
"""

# SQL_PAUSED_QUEUES — every paused queue, in code-point order.
SQL_PAUSED_QUEUES = 'SELECT queue FROM x_job_paused_queues ORDER BY queue COLLATE "C"'

# SQL_PAUSE_TASK — a paused task is a row the scheduler reads when it is due (primary key).
SQL_PAUSE_TASK = """
INSERT INTO x_job_paused_tasks (task, paused_at) VALUES (%(task)s, to_timestamp(%(now)s / 1000.0))
ON CONFLICT (task) DO NOTHING
"""

# SQL_RESUME_TASK — drop the pause row; its own catch-up decides what the task missed.
SQL_RESUME_TASK = "DELETE FROM x_job_paused_tasks WHERE task = %(task)s"

# SQL_PAUSED_TASKS — every paused task, in code-point order.
SQL_PAUSED_TASKS = 'SELECT task FROM x_job_paused_tasks ORDER BY task COLLATE "C"'

# -- workers ---------------------------------------------------------------------------------------

# SQL_WORKERS — every live worker, oldest first: a row whose last heartbeat is one %(window)s or more
# old is expired — deleted in the same statement and never answered. x_workers holds one row per
# running worker process, so the scan is small.
SQL_WORKERS = """
WITH expired AS (
    DELETE FROM x_workers WHERE heartbeat_at <= to_timestamp((%(now)s - %(window)s) / 1000.0)
)
SELECT w.id, w.host, w.pid, (extract(epoch from w.started_at) * 1000)::bigint AS started_at, w.queues, w.slots,
       w.in_flight, (extract(epoch from w.heartbeat_at) * 1000)::bigint AS heartbeat_at
FROM x_workers w
WHERE w.heartbeat_at > to_timestamp((%(now)s - %(window)s) / 1000.0)
ORDER BY w.started_at, w.id COLLATE "C"
"""

# -- counters --------------------------------------------------------------------------------------

# SQL_COUNTERS — one job's buckets of every tier that end after %(since)s, oldest first
# (x_job_counters_bucket_uniq leads with job).
SQL_COUNTERS = f"""
SELECT c.job, (extract(epoch from c.bucket) * 1000)::bigint, c.width_ms, c.done, c.retried, c.failed, c.dead,
       c.duration_ms, {RUN_BINS}
FROM x_job_counters c
WHERE c.job = %(job)s
  AND c.bucket + c.width_ms * interval '1 millisecond' > to_timestamp(%(since)s / 1000.0)
ORDER BY c.bucket, c.width_ms
"""

# SQL_COUNTER_TOTALS — per job, the sum of every bucket that ends after %(since)s, by job name in
# code-point order. At most 4,176 rows per job name (COUNTER_TIERS).
SQL_COUNTER_TOTALS = """
SELECT c.job, sum(c.done)::bigint, sum(c.retried)::bigint, sum(c.failed)::bigint, sum(c.dead)::bigint,
       sum(c.duration_ms)::bigint
FROM x_job_counters c
WHERE c.bucket + c.width_ms * interval '1 millisecond' > to_timestamp(%(since)s / 1000.0)
GROUP BY c.job
ORDER BY c.job COLLATE "C"
"""

# The epoch-ms start of the %(width)s-wide bucket holding counter bucket ``c``.
WIDER_BUCKET = "(floor(extract(epoch from c.bucket) * 1000 / %(width)s) * %(width)s)::bigint"

# SQL_COUNTER_SERIES — every job's buckets that end after %(since)s, summed into buckets of %(width)s ms,
# oldest first: at most one row per bucket of that width, whatever the number of jobs.
SQL_COUNTER_SERIES = f"""
SELECT {WIDER_BUCKET} AS at, sum(c.done)::bigint, sum(c.retried)::bigint, sum(c.failed)::bigint,
       sum(c.dead)::bigint, sum(c.duration_ms)::bigint, {RUN_BIN_SUMS}
FROM x_job_counters c
WHERE c.bucket + c.width_ms * interval '1 millisecond' > to_timestamp(%(since)s / 1000.0)
GROUP BY 1
ORDER BY 1
"""

# SQL_WAIT_SERIES — every queue's wait bins in the buckets that end after %(since)s, summed into buckets of
# %(width)s ms: a row per queue, bucket and bin that counted something, oldest first.
SQL_WAIT_SERIES = f"""
SELECT c.queue, {WIDER_BUCKET} AS at, c.bin, sum(c.count)::bigint
FROM x_job_waits c
WHERE c.bucket + c.width_ms * interval '1 millisecond' > to_timestamp(%(since)s / 1000.0)
GROUP BY 1, 2, 3
ORDER BY 2, 1, 3
"""

# SQL_QUEUE_SAMPLES — the queues' depth samples from %(since)s on, gathered into buckets of %(width)s ms: per
# bucket and queue the most waiting and the oldest age any sample saw ("" marks a sampled bucket).
SQL_QUEUE_SAMPLES = f"""
SELECT c.queue, {WIDER_BUCKET} AS at, max(c.depth), max(c.oldest_age_ms)
FROM x_job_queue_samples c
WHERE c.bucket >= to_timestamp(%(since)s / 1000.0)
GROUP BY 1, 2
ORDER BY 2, 1
"""

# -- task fires ------------------------------------------------------------------------------------

# SQL_TASK_FIRES — per task, the last occurrence that dispatched, by task name in code-point order,
# at most %(limit)s rows (primary key).
SQL_TASK_FIRES = """
SELECT f.task, (extract(epoch from f.occurrence_at) * 1000)::bigint, (extract(epoch from f.fired_at) * 1000)::bigint
FROM x_job_task_fires f
ORDER BY f.task COLLATE "C"
LIMIT %(limit)s
"""
