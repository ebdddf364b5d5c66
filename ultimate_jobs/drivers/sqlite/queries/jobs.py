"""Every statement of the SQLite driver's hot path, verbatim, one constant each.

An operator debugging a stuck queue can read and run the exact statement (``sqlite3 db.sqlite3``, then
``.parameter set :now '…'``). Conventions: SQLite's named parameters (``:now``); instants are the column
text the caller computed from its own clock (:func:`~.rows.ts`) — no statement reads SQLite's clock; a
list is a JSON array read with ``json_each``. SQLite runs one writer at a time, so an operation of
several statements runs in one ``BEGIN IMMEDIATE`` transaction (``SqliteExecutor.write``) and is as
atomic as Postgres's single statement. The operator statements live in :mod:`.operator`.
"""

from __future__ import annotations

from ....contracts.series import WAIT_BINS
from ...sql.clauses import RUN_BINS, run_bins_added

LIVE_STATES_SQL = "('ready', 'delayed', 'running', 'suspended')"
FINISHED_STATES_SQL = "('done', 'failed', 'dead', 'cancelled')"

# Every statement that answers job rows selects exactly these columns, in this order.
JOB_COLUMNS = """j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.attempts,
    j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at, j.input, j.last_error, j.last_code,
    j.finished_at, j.worker_id, j.claim, j.lease_until, j.progress, j.enqueued_by, j.traceparent,
    j.concurrency_key"""

# JOB_COLUMNS as an UPDATE's RETURNING clause names them (SQLite's RETURNING reads the target table unqualified).
RETURNING_JOB_COLUMNS = JOB_COLUMNS.replace("j.", "")

# Every statement that answers step rows selects exactly these columns, in this order.
STEP_COLUMNS = "s.name, s.seq, s.status, s.output, s.started_at, s.finished_at, s.wake_at, s.meta"

# SQL_RECORD_WORKER — upsert a worker's registry row (x_workers, primary key): the whole row is replaced,
# the heartbeat included. A claim carrying a registry row runs it in the claim's transaction.
SQL_RECORD_WORKER = """INSERT INTO x_workers (id, host, pid, started_at, queues, slots, in_flight, heartbeat_at)
VALUES (:id, :host, :pid, :started, :queues, :slots, :in_flight, :heartbeat)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at, queues = excluded.queues,
    slots = excluded.slots, in_flight = excluded.in_flight, heartbeat_at = excluded.heartbeat_at"""

# SQL_REMOVE_WORKER — drop a worker's registry row (a clean shutdown); an unknown id is a no-op.
SQL_REMOVE_WORKER = "DELETE FROM x_workers WHERE id = :id"

# The columns every statement that inserts jobs sets, in this order.
INSERT_JOBS_INTO = """INSERT INTO x_jobs (
    id, run_id, name, queue, tenant_id, idempotency_key, input, state, attempts, max_attempts, priority,
    run_at, created_at, updated_at, enqueued_by, traceparent, concurrency_key, lane
)"""

# SQL_ENQUEUE_ONE — insert ONE job. Inserts nothing under an id that names a row (primary key) or a
# (name, tenant, idempotency key) a live row holds (x_jobs_name_tenant_idempotency_live_idx, a partial
# unique index over the live states): ON CONFLICT DO NOTHING covers both, and the statement answers no
# row. :state and :run_at are the caller's (ready, or delayed when run_at is ahead of now).
SQL_ENQUEUE_ONE = f"""{INSERT_JOBS_INTO}
VALUES (:id, :run_id, :name, :queue, :tenant_id, :idempotency_key, :input, :state, 0, :max_attempts, :priority,
        :run_at, :now, :now, :enqueued_by, :traceparent, :concurrency_key, :lane)
ON CONFLICT DO NOTHING
RETURNING id"""

# SQL_ENQUEUE — insert a batch of jobs in ONE statement, in request order (:rows, a JSON array of the
# column values rows.enqueue_rows() built). The same guarantees as SQL_ENQUEUE_ONE row by row: a row
# that conflicts with an existing row, or with an earlier row of the same batch, inserts nothing.
# Answers the ids it inserted.
SQL_ENQUEUE = f"""{INSERT_JOBS_INTO}
SELECT json_extract(r.value, '$.id'), json_extract(r.value, '$.run_id'), json_extract(r.value, '$.name'),
       json_extract(r.value, '$.queue'), json_extract(r.value, '$.tenant_id'),
       json_extract(r.value, '$.idempotency_key'), json_extract(r.value, '$.input'),
       json_extract(r.value, '$.state'), 0, json_extract(r.value, '$.max_attempts'),
       json_extract(r.value, '$.priority'), json_extract(r.value, '$.run_at'), :now, :now,
       json_extract(r.value, '$.enqueued_by'), json_extract(r.value, '$.traceparent'),
       json_extract(r.value, '$.concurrency_key'), json_extract(r.value, '$.lane')
FROM json_each(:rows) r
WHERE true
ORDER BY r.key
ON CONFLICT DO NOTHING
RETURNING id"""

# SQL_ENQUEUE_HOLDER — for a request that inserted nothing: the row holding its id (primary key), else
# its live key (x_jobs_name_tenant_idempotency_live_idx). No row when the holder is gone already. The
# third column says the id is held under another tenant: the driver refuses that request and answers
# nothing of the row (a live key is per tenant already, so only an id can cross tenants).
SQL_ENQUEUE_HOLDER = f"""
SELECT id, run_id, other_tenant FROM (
    SELECT 0 AS rank, x.id, x.run_id, coalesce(x.tenant_id, '') <> coalesce(:tenant_id, '') AS other_tenant
    FROM x_jobs x WHERE x.id = :id
    UNION ALL
    SELECT 1, x.id, x.run_id, 0 FROM x_jobs x
    WHERE x.name = :name AND coalesce(x.tenant_id, '') = coalesce(:tenant_id, '')
      AND x.idempotency_key = :idempotency_key AND x.state IN {LIVE_STATES_SQL}
)
ORDER BY rank
LIMIT 1
"""

# SQL_PAUSED_AMONG — which of the queues in :queues (a JSON array) are paused (x_job_paused_queues).
SQL_PAUSED_AMONG = """
SELECT p.queue FROM x_job_paused_queues p WHERE p.queue IN (SELECT value FROM json_each(:queues))
"""

# SQL_CLAIM_DUE — the claim's first arm for ONE queue: ready, delayed and suspended rows whose run_at has
# passed, in claim order (priority desc, run_at, id — ids are UUIDv7, so enqueue order), at most :cap
# (x_jobs_claim_idx, walked in its own order). The claim's BEGIN IMMEDIATE holds SQLite's write lock, so
# no other claim reads these rows until this one commits.
SQL_CLAIM_DUE = """
SELECT j.id, j.name, j.state, j.attempts, j.max_attempts, j.priority, j.run_at
FROM x_jobs j
WHERE j.queue = :queue AND j.state IN ('ready', 'delayed', 'suspended') AND j.run_at <= :now
ORDER BY j.priority DESC, j.run_at, j.id
LIMIT :cap
"""

# SQL_CLAIM_LAPSED — the claim's second arm for ONE queue: running rows whose lease lapsed (their worker
# died), oldest lease first, at most :cap rows (x_jobs_lease_idx). The caller re-takes them, except a
# row already at attempts >= max_attempts, which it buries (SQL_BURY).
SQL_CLAIM_LAPSED = """
SELECT j.id, j.name, j.state, j.attempts, j.max_attempts, j.priority, j.run_at
FROM x_jobs j
WHERE j.state = 'running' AND j.lease_until <= :now AND j.queue = :queue
ORDER BY j.lease_until
LIMIT :cap
"""

# SQL_BURY — bury the lapsed final attempts :ids (a JSON array, primary key): dead (failed when the
# name is in :drop), last_error LEASE_LAPSED_FINAL_ATTEMPT, finished now, never handed out (worker_id
# keeps the worker whose lease lapsed). Answers the
# buried rows; the caller counts them (SQL_COUNT) in the same transaction.
SQL_BURY = f"""
UPDATE x_jobs AS j
SET state = CASE WHEN j.name IN (SELECT value FROM json_each(:drop)) THEN 'failed' ELSE 'dead' END,
    last_error = 'LEASE_LAPSED_FINAL_ATTEMPT', last_code = NULL, finished_at = :now, updated_at = :now,
    claim = NULL, lease_until = NULL
WHERE j.id IN (SELECT value FROM json_each(:ids)) AND j.state = 'running'
RETURNING {RETURNING_JOB_COLUMNS}
"""

# SQL_CLAIM_TAKE — hand out the rows :ids (a JSON array, primary key): running, attempts + 1, this
# worker, a fresh random claim token each, a lease to :lease. Answers the claimed rows.
SQL_CLAIM_TAKE = f"""
UPDATE x_jobs AS j
SET state = 'running', attempts = j.attempts + 1, worker_id = :worker, claim = lower(hex(randomblob(16))),
    lease_until = :lease, updated_at = :now, finished_at = NULL
WHERE j.id IN (SELECT value FROM json_each(:ids))
RETURNING {RETURNING_JOB_COLUMNS}
"""

# SQL_STEPS_OF — the persisted steps of the jobs :ids (a JSON array), by job then seq
# (x_job_steps_job_seq_idx): what a claim hands back for replay.
SQL_STEPS_OF = f"""
SELECT s.job_id, {STEP_COLUMNS}
FROM x_job_steps s
WHERE s.job_id IN (SELECT value FROM json_each(:ids))
ORDER BY s.job_id, s.seq, s.id
"""

# The run-time bins' parameters (:run_bin_0 …), in x_job_counters' column order (RUN_BINS).
RUN_BIN_PARAMS = ", ".join(f":run_bin_{i}" for i in range(WAIT_BINS))

# SQL_COUNT — move the 1-minute x_job_counters bucket :bucket of job :job (x_job_counters_bucket_uniq)
# by the given settles and duration. Runs in the settling statement's transaction, so a counter moves
# exactly when its row settles.
SQL_COUNT = f"""
INSERT INTO x_job_counters (job, width_ms, bucket, done, retried, failed, dead, duration_ms, {RUN_BINS})
VALUES (:job, 60000, :bucket, :done, :retried, :failed, :dead, :duration, {RUN_BIN_PARAMS})
ON CONFLICT (job, width_ms, bucket) DO UPDATE
SET done = done + excluded.done, retried = retried + excluded.retried, failed = failed + excluded.failed,
    dead = dead + excluded.dead, duration_ms = duration_ms + excluded.duration_ms, {run_bins_added("")}
"""

# SQL_COUNT_WAITS — add :count attempts to bin :bin of queue :queue's 1-minute x_job_waits bucket :bucket
# (x_job_waits_bucket_uniq), in the settling statement's transaction, as SQL_COUNT.
SQL_COUNT_WAITS = """
INSERT INTO x_job_waits (queue, width_ms, bucket, bin, count)
VALUES (:queue, 60000, :bucket, :bin, :count)
ON CONFLICT (queue, width_ms, bucket, bin) DO UPDATE SET count = count + excluded.count
"""

# SQL_ACK — settle running rows done, each fenced on ITS OWN claim (state = 'running' AND worker_id AND
# claim): a body whose lease lapsed cannot settle the run that replaced it. The claim and lease are
# cleared; worker_id keeps the worker of this last attempt until the next claim replaces it. :acks is a JSON array of
# {id, worker, claim}; one statement settles a batch. Answers (id, name, queue) of the rows that landed; the
# caller moves their counters (SQL_COUNT) and waits (SQL_COUNT_WAITS) in the same transaction.
SQL_ACK = """
UPDATE x_jobs AS j
SET state = 'done', finished_at = :now, updated_at = :now, claim = NULL, lease_until = NULL
FROM (SELECT json_extract(a.value, '$.id') AS id, json_extract(a.value, '$.worker') AS worker,
             json_extract(a.value, '$.claim') AS claim
      FROM json_each(:acks) a) AS a
WHERE j.id = a.id AND j.state = 'running' AND j.worker_id = a.worker AND j.claim = a.claim
RETURNING id, name, queue
"""

# SQL_NACK — settle one running row by nack_state() (:state: ready, suspended, failed or dead), fenced on
# the claim; the claim and lease are cleared, worker_id kept (as SQL_ACK). :uncount hands the attempt
# back (a suspension, a drain, a shed). :run_at is when it is due again (NULL: now for ready, unchanged
# otherwise). Answers (name, queue, state, run_at) when it landed; the caller moves the counter
# (SQL_COUNT) and, for a counted nack, the wait (SQL_COUNT_WAITS) in the same transaction.
SQL_NACK = """
UPDATE x_jobs AS j
SET state = :state,
    attempts = max(0, j.attempts - :uncount),
    run_at = coalesce(:run_at, CASE WHEN :state = 'ready' THEN :now ELSE j.run_at END),
    last_error = coalesce(:error, j.last_error),
    last_code = CASE WHEN :error IS NULL THEN j.last_code ELSE :code END,
    finished_at = CASE WHEN :state IN ('dead', 'failed') THEN :now END,
    updated_at = :now, claim = NULL, lease_until = NULL
WHERE j.id = :id AND j.state = 'running' AND j.worker_id = :worker AND j.claim = :claim
RETURNING name, queue, state, run_at
"""

# SQL_HEARTBEAT — renew many leases in ONE statement, each fenced on its claim (:beats, a JSON array of
# {id, worker, claim}). Answers the ids whose renewal landed; a missing id was cancelled or re-claimed.
SQL_HEARTBEAT = """
UPDATE x_jobs AS j
SET lease_until = :lease
FROM (SELECT json_extract(h.value, '$.id') AS id, json_extract(h.value, '$.worker') AS worker,
             json_extract(h.value, '$.claim') AS claim
      FROM json_each(:beats) h) AS h
WHERE j.id = h.id AND j.state = 'running' AND j.worker_id = h.worker AND j.claim = h.claim
RETURNING id
"""

# SQL_SAVE_STEP — persist one step under the claim (x_job_steps_job_name_uniq): written only while the
# job is running under this worker and claim; a replayed name overwrites its own row. Answers the step
# row's id when it landed.
SQL_SAVE_STEP = """
INSERT INTO x_job_steps (job_id, name, seq, status, output, started_at, finished_at, wake_at, meta)
SELECT :id, :name, :seq, :status, :output, :started, :finished, :wake, :meta
WHERE EXISTS (
    SELECT 1 FROM x_jobs j
    WHERE j.id = :id AND j.state = 'running' AND j.worker_id = :worker AND j.claim = :claim
)
ON CONFLICT (job_id, name) DO UPDATE
SET seq = excluded.seq, status = excluded.status, output = excluded.output, started_at = excluded.started_at,
    finished_at = excluded.finished_at, wake_at = excluded.wake_at, meta = excluded.meta
RETURNING id
"""

# SQL_SAVE_STEP_HELD — SQL_SAVE_STEP for run.step.atomic(), inside the caller's transaction. SQLite has one
# writer at a time: from this write on, the caller's transaction holds the database's write lock until it
# ends, so no claim can take the row over between the fence read here and the commit.
SQL_SAVE_STEP_HELD = SQL_SAVE_STEP

# SQL_RECORD_PROGRESS — write run.progress(), fenced on the claim like every settle. Answers the id.
SQL_RECORD_PROGRESS = """
UPDATE x_jobs SET progress = :progress
WHERE id = :id AND state = 'running' AND worker_id = :worker AND claim = :claim
RETURNING id
"""

# SQL_STATS — per queue, the count of each LIVE state and the oldest due ready row, the dead-letter
# queue's size and whether the queue is paused: each count a range of x_jobs_state_queue_idx (state leads
# it), so finished rows cost nothing however long the history grows.
SQL_STATS = f"""
SELECT q.queue, q.state, q.n, q.oldest, (p.queue IS NOT NULL)
FROM (
    SELECT queue, state, count(*) AS n,
           min(CASE WHEN state IN ('ready', 'delayed') AND run_at <= :now THEN run_at END) AS oldest
    FROM x_jobs
    WHERE state IN {LIVE_STATES_SQL}
    GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*), NULL FROM x_jobs WHERE state = 'dead' GROUP BY queue, state
) q
LEFT JOIN x_job_paused_queues p ON p.queue = q.queue
ORDER BY q.queue, q.state
"""

# SQL_PURGE_PICK — retention: the ids of at most :limit rows of finished state :state that finished
# before :before, oldest created first. A row finished before the cutoff was created before it, so the
# pick reads the range of x_jobs_state_queue_idx (state, queue, created_at) below the cutoff and re-checks
# finished_at; no index serves retention alone (each would cost every claim and settle). The caller
# merges the states' picks, keeps the :limit oldest and deletes them (SQL_PURGE_DELETE) in the same
# transaction.
SQL_PURGE_PICK = f"""
SELECT j.id, j.created_at
FROM x_jobs j
WHERE j.state = :state AND j.state IN {FINISHED_STATES_SQL} AND j.created_at < :before AND j.finished_at < :before
ORDER BY j.created_at
LIMIT :limit
"""

# SQL_PURGE_DELETE — delete the finished rows :ids (a JSON array, primary key), re-checking that each is
# still finished, and answer the ids that went; their steps go with SQL_DELETE_STEPS.
SQL_PURGE_DELETE = f"""
DELETE FROM x_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN {FINISHED_STATES_SQL}
RETURNING id
"""

# SQL_DELETE_STEPS — delete the steps of the jobs :ids (a JSON array; x_job_steps_job_seq_idx).
SQL_DELETE_STEPS = "DELETE FROM x_job_steps WHERE job_id IN (SELECT value FROM json_each(:ids))"

# -- fleet leases (x_job_leases) ---------------------------------------------------------------------
# SQLite's one write lock serialises acquirers: SQL_LEASE_* run in one BEGIN IMMEDIATE transaction.

# SQL_LEASE_PURGE — drop lapsed slots of other holders of :key.
SQL_LEASE_PURGE = "DELETE FROM x_job_leases WHERE key = :key AND holder <> :holder AND expires_at <= :now"

# SQL_LEASE_RENEW — extend a live slot of :holder; a lapsed or taken one answers no row.
SQL_LEASE_RENEW = """
UPDATE x_job_leases SET expires_at = :expires
WHERE key = :key AND holder = :holder AND expires_at > :now
RETURNING id
"""

# SQL_LEASE_OTHERS — how many OTHER live holders :key has (x_job_leases_key_idx).
SQL_LEASE_OTHERS = "SELECT count(*) FROM x_job_leases WHERE key = :key AND holder <> :holder AND expires_at > :now"

# SQL_LEASE_TAKE — take a slot of :key for :holder; a lapsed slot of its own goes to the back of the
# slot order (a new acquired_at).
SQL_LEASE_TAKE = """
INSERT INTO x_job_leases (key, holder, acquired_at, expires_at) VALUES (:key, :holder, :now, :expires)
ON CONFLICT (key, holder) DO UPDATE SET acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
"""

# SQL_LEASE_RELEASE — give a slot back (a holder holding nothing is a no-op).
SQL_LEASE_RELEASE = "DELETE FROM x_job_leases WHERE key = :key AND holder = :holder"

# SQL_LEASE_HOLDERS — the live holders of one key, in slot order.
SQL_LEASE_HOLDERS = """
SELECT holder FROM x_job_leases WHERE key = :key AND expires_at > :now ORDER BY acquired_at, id
"""

# -- rate schedules (@job(rate_limit=...)): drivers/rates.py's decide() on what these read, in one
# BEGIN IMMEDIATE transaction ------------------------------------------------------------------

# SQL_RATE_HELD — the reservation :holder holds on :key, if any.
SQL_RATE_HELD = "SELECT at_ms FROM x_job_rate_holds WHERE key = :key AND holder = :holder"

# SQL_RATE_NEXT — :key's next free instant, if it was ever taken.
SQL_RATE_NEXT = "SELECT next_at_ms FROM x_job_rates WHERE key = :key"

# SQL_RATE_MOVE — set :key's next free instant.
SQL_RATE_MOVE = """INSERT INTO x_job_rates (key, next_at_ms) VALUES (:key, :next_at_ms)
ON CONFLICT (key) DO UPDATE SET next_at_ms = excluded.next_at_ms"""

# SQL_RATE_HOLD — reserve :at_ms for :holder on :key (replacing a stale reservation).
SQL_RATE_HOLD = """INSERT INTO x_job_rate_holds (key, holder, at_ms) VALUES (:key, :holder, :at_ms)
ON CONFLICT (key, holder) DO UPDATE SET at_ms = excluded.at_ms"""

# SQL_RATE_SPEND — drop :holder's reservation on :key (it starts now).
SQL_RATE_SPEND = "DELETE FROM x_job_rate_holds WHERE key = :key AND holder = :holder"

# SQL_RATE_STATE — every rate key's next free instant and its reservations, by key (at most 1,000 keys).
SQL_RATE_STATE = """SELECT r.key, r.next_at_ms, (SELECT count(*) FROM x_job_rate_holds h WHERE h.key = r.key)
FROM x_job_rates r ORDER BY r.key LIMIT 1000"""

# SQL_RATE_FORGET_SCHEDULES / SQL_RATE_FORGET_HOLDS — drop what is before :before; a row per row gone.
SQL_RATE_FORGET_SCHEDULES = "DELETE FROM x_job_rates WHERE next_at_ms < :before RETURNING 1"
SQL_RATE_FORGET_HOLDS = "DELETE FROM x_job_rate_holds WHERE at_ms < :before RETURNING 1"
