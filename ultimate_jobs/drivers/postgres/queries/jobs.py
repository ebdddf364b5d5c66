"""Every statement of the Postgres driver's hot path, verbatim, one constant each.

An operator debugging a stuck queue can read and run the exact statement. Conventions: named
parameters (``%(now)s``); the caller's clock is injected as epoch milliseconds and converted with
``to_timestamp(%(now)s / 1000.0)`` — no statement compares with the server's ``now()``; times come
back as epoch ms. The operator statements live in :mod:`.operator`.
"""

from __future__ import annotations

from ....contracts.series import WAIT_BINS, WAIT_EDGES_MS
from ...sql.clauses import RUN_BINS, run_bins_added

LIVE_STATES_SQL = "('ready', 'delayed', 'running', 'suspended')"
WAKE_CHANNEL = "x_jobs_wake"
WAKE_DUE_WITHIN_MS = 1_000

# Every statement that answers job rows selects exactly these columns, in this order, each named as
# drivers.sql.rows.JOB_FIELDS names it (times as epoch ms; uuids as text, which is what the records hold).
JOB_COLUMNS = """
    j.id::text AS id, j.run_id::text AS run_id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key,
    j.attempts, j.max_attempts, j.priority, (extract(epoch from j.run_at) * 1000)::bigint AS run_at,
    (extract(epoch from j.created_at) * 1000)::bigint AS created_at,
    (extract(epoch from j.updated_at) * 1000)::bigint AS updated_at, j.input, j.last_error, j.last_code,
    (extract(epoch from j.finished_at) * 1000)::bigint AS finished_at, j.worker_id, j.claim::text AS claim,
    (extract(epoch from j.lease_until) * 1000)::bigint AS lease_until, j.progress, j.enqueued_by, j.traceparent,
    j.concurrency_key
"""

# Every statement that answers step rows selects exactly these values (STEP_VALUES), in the order of
# drivers.sql.rows.STEP_FIELDS; STEP_COLUMNS names each column so. The jsonb columns are read as their JSON
# text, so a step nested in SQL_CLAIM's json_agg (an array of STEP_VALUES) decodes the same way as one
# selected on its own (a string output must not be mistaken for JSON text).
STEP_VALUES = """
    s.name, s.seq, s.status, s.output::text, (extract(epoch from s.started_at) * 1000)::bigint,
    (extract(epoch from s.finished_at) * 1000)::bigint, (extract(epoch from s.wake_at) * 1000)::bigint, s.meta::text
"""
STEP_COLUMNS = """
    s.name, s.seq, s.status, s.output::text AS output,
    (extract(epoch from s.started_at) * 1000)::bigint AS started_at,
    (extract(epoch from s.finished_at) * 1000)::bigint AS finished_at,
    (extract(epoch from s.wake_at) * 1000)::bigint AS wake_at, s.meta::text AS meta
"""

# The upsert of a worker's registry row (x_workers, primary key): the whole row is replaced, the heartbeat
# included. Shared by SQL_RECORD_WORKER and SQL_CLAIM (which carries an idle worker's registry row).
RECORD_WORKER_UPSERT = """INSERT INTO x_workers AS w (id, host, pid, started_at, queues, slots, in_flight, heartbeat_at)
    SELECT %(id)s, %(host)s, %(pid)s, to_timestamp(%(started)s / 1000.0), %(queues)s::jsonb, %(slots)s,
           %(in_flight)s::jsonb, to_timestamp(%(heartbeat)s / 1000.0)
    ON CONFLICT (id) DO UPDATE
    SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at, queues = excluded.queues,
        slots = excluded.slots, in_flight = excluded.in_flight, heartbeat_at = excluded.heartbeat_at"""

# RECORD_WORKER_UPSERT as SQL_CLAIM runs it: parameters prefixed w_, written only when %(record)s is true.
CLAIM_RECORD_WORKER = RECORD_WORKER_UPSERT.replace("%(", "%(w_").replace(
    "    ON CONFLICT", "    WHERE %(record)s::boolean\n    ON CONFLICT"
)

# The request rows of an enqueue, one per job, as every statement that inserts jobs reads them
# (%(rows)s is the JSON array rows.enqueue_rows() builds).
ENQUEUE_RECORDSET = """jsonb_to_recordset(%(rows)s::jsonb) AS r(
        ord int, id uuid, run_id uuid, name text, queue text, tenant_id text, idempotency_key text,
        input jsonb, max_attempts int, priority int, run_at_ms bigint, enqueued_by text,
        traceparent text, concurrency_key text, lane text
    )"""

# The head every statement that inserts jobs starts with: the columns an enqueue sets, in this order.
INSERT_JOBS_INTO = """INSERT INTO x_jobs (
        id, run_id, name, queue, tenant_id, idempotency_key, input, state, attempts, max_attempts,
        priority, run_at, created_at, updated_at, enqueued_by, traceparent, concurrency_key, lane
    )"""

# Insert the rows of a CTE named ``req`` (ENQUEUE_RECORDSET's columns) in request order: ready, or
# delayed when run_at is ahead of %(now)s; nothing under an id or a live key that exists (ON CONFLICT
# DO NOTHING over the primary key and x_jobs_name_tenant_idempotency_live_idx). Shared by SQL_ENQUEUE
# and the scheduler's SQL_SCHEDULER_FIRE; the caller appends its own RETURNING.
INSERT_JOBS_FROM_REQ = f"""{INSERT_JOBS_INTO}
    SELECT id, run_id, name, queue, tenant_id, idempotency_key, input,
           CASE WHEN coalesce(run_at_ms, %(now)s) > %(now)s THEN 'delayed' ELSE 'ready' END,
           0, max_attempts, priority, to_timestamp(coalesce(run_at_ms, %(now)s) / 1000.0),
           to_timestamp(%(now)s / 1000.0), to_timestamp(%(now)s / 1000.0), enqueued_by, traceparent,
           concurrency_key, lane
    FROM req
    ORDER BY ord
    ON CONFLICT DO NOTHING"""

# The queues a wake announces, from a CTE ``ins`` (queue, run_at) of the rows a statement inserted: each
# queue that got a row due within WAKE_DUE_WITHIN_MS — unless a due row of that queue was already waiting
# unclaimed before this statement (the head of its claim order, read off x_jobs_claim_idx: one index
# entry, as the claim reads it; the statement's snapshot does not see ``ins``). Then the workers are woken
# for that row already, or busy with the queue: the pass that claims it, or the one they run at the floor
# after it, takes this row too. So a burst of enqueues into an idle queue wakes it once, not once per
# row: Postgres serialises the commit of every transaction that issued a NOTIFY behind one lock, held
# through its WAL flush, and one per enqueue would cap enqueuing commits at one flush at a time. A pickup
# is never later than the worker's floor poll (250 ms) behind the head row's.
WAKE_QUEUES = f"""SELECT pg_notify('{WAKE_CHANNEL}', q.queue)
    FROM (SELECT DISTINCT queue FROM ins WHERE run_at <= to_timestamp((%(now)s + {WAKE_DUE_WITHIN_MS}) / 1000.0)) q
    WHERE NOT EXISTS (
        SELECT 1 FROM (
            SELECT w.run_at FROM x_jobs w
            WHERE w.queue = q.queue AND w.state IN ('ready', 'delayed', 'suspended')
            ORDER BY w.priority DESC, w.run_at, w.id
            LIMIT 1
        ) head
        WHERE head.run_at <= to_timestamp(%(now)s / 1000.0)
    )"""

# SQL_ENQUEUE — insert a batch of jobs in ONE statement, in request order.
# Guarantees: inserts nothing under an id that already names a row (live or finished), and nothing
# under a (name, tenant, idempotency key) a live row holds (x_jobs_name_tenant_idempotency_live_idx)
# — ON CONFLICT DO NOTHING covers both. Answers the ids it inserted (the caller minted them); for the
# requests that inserted nothing the driver asks SQL_ENQUEUE_HOLDERS. Announces each queue that got a
# row due within WAKE_DUE_WITHIN_MS with pg_notify('x_jobs_wake', queue), once per queue per batch and
# only where no due row was waiting already (WAKE_QUEUES).
SQL_ENQUEUE = f"""
WITH req AS (
    SELECT * FROM {ENQUEUE_RECORDSET}
),
ins AS (
    {INSERT_JOBS_FROM_REQ}
    RETURNING id, queue, run_at
),
wake AS (
    {WAKE_QUEUES}
)
SELECT id FROM ins CROSS JOIN (SELECT count(*) FROM wake) announced
"""

# SQL_ENQUEUE_HOLDERS — for request rows (ENQUEUE_RECORDSET) that SQL_ENQUEUE inserted nothing for: the
# row holding each one's id (primary key), else its live key (x_jobs_name_tenant_idempotency_live_idx) —
# a row of the same batch, or one a concurrent enqueue committed after SQL_ENQUEUE's snapshot (its ON
# CONFLICT waited for that commit; this new statement sees it). NULL when the holder is gone already.
# The third column says the id is held under another tenant: the driver refuses that request and
# answers nothing of the row (a live key is per tenant already, so only an id can cross tenants).
SQL_ENQUEUE_HOLDERS = f"""
SELECT r.ord, coalesce(e.id, l.id), coalesce(e.run_id, l.run_id),
       e.id IS NOT NULL AND coalesce(e.tenant_id, '') <> coalesce(r.tenant_id, '')
FROM {ENQUEUE_RECORDSET}
LEFT JOIN LATERAL (
    SELECT x.id, x.run_id, x.tenant_id FROM x_jobs x WHERE x.id = r.id
    LIMIT 1  -- keeps the probe a subquery: pulled up into a join, it would hash a scan of x_jobs
) e ON true
LEFT JOIN LATERAL (
    SELECT x.id, x.run_id FROM x_jobs x
    WHERE x.name = r.name AND coalesce(x.tenant_id, '') = coalesce(r.tenant_id, '')
      AND x.idempotency_key = r.idempotency_key AND x.state IN {LIVE_STATES_SQL}
    LIMIT 1
) l ON true
ORDER BY r.ord
"""

# SQL_ENQUEUE_ONE — insert ONE job: the common path of a single enqueue (SQL_ENQUEUE's guarantees for one
# row, as a plain INSERT … VALUES, cheap to plan on every call). Inserts nothing under an id or a live
# key that exists (ON CONFLICT DO NOTHING); then it answers no row and the driver asks
# SQL_ENQUEUE_HOLDERS for the holder. %(state)s and %(run_at)s are computed by the caller (ready, or delayed
# when run_at is ahead of %(now)s). Announces the queue when the row is due within WAKE_DUE_WITHIN_MS and
# no due row of its queue was waiting unclaimed already (WAKE_QUEUES).
SQL_ENQUEUE_ONE = f"""
WITH ins AS (
    {INSERT_JOBS_INTO}
    VALUES (
        %(id)s, %(run_id)s, %(name)s, %(queue)s, %(tenant_id)s, %(idempotency_key)s, %(input)s::jsonb, %(state)s, 0,
        %(max_attempts)s, %(priority)s, to_timestamp(%(run_at)s / 1000.0), to_timestamp(%(now)s / 1000.0),
        to_timestamp(%(now)s / 1000.0), %(enqueued_by)s, %(traceparent)s, %(concurrency_key)s, %(lane)s
    )
    ON CONFLICT DO NOTHING
    RETURNING id, run_id, queue, run_at
),
wake AS (
    {WAKE_QUEUES}
)
SELECT id, run_id FROM ins CROSS JOIN (SELECT count(*) FROM wake) announced
"""

# SQL_CLAIM's two arms over its CTE ``wanted`` (queue, cap), shared with SQL_CLAIM_FAIR: ``due``, each queue's
# due rows in claim order (x_jobs_claim_idx), and ``lapsed``, its running rows whose lease lapsed
# (x_jobs_lease_idx), a few more than the cap so final attempts can be buried on the way; both locked FOR
# UPDATE SKIP LOCKED, each row with its queue's cap first.
CLAIM_ARMS = """due AS (
    SELECT w.cap, k.*
    FROM wanted w
    CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.name, j.state, j.attempts, j.max_attempts, j.priority, j.run_at
        FROM x_jobs j
        WHERE j.queue = w.queue AND j.state IN ('ready', 'delayed', 'suspended')
          AND j.run_at <= to_timestamp(%(now)s / 1000.0)
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT w.cap
        FOR UPDATE SKIP LOCKED
    ) k
),
lapsed AS (
    SELECT w.cap, k.*
    FROM wanted w
    CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.name, j.state, j.attempts, j.max_attempts, j.priority, j.run_at
        FROM x_jobs j
        WHERE j.state = 'running' AND j.lease_until <= to_timestamp(%(now)s / 1000.0) AND j.queue = w.queue
        ORDER BY j.lease_until
        LIMIT w.cap + %(bury)s
        FOR UPDATE SKIP LOCKED
    ) k
)"""

# SQL_CLAIM's end, shared with SQL_CLAIM_FAIR: bury ``exhausted`` (id, name), count the buried, claim
# ``take`` (id), and answer the 'claimed' rows with their steps and the 'buried' ones.
CLAIM_SETTLE = f"""buried AS (
    UPDATE x_jobs j
    SET state = CASE WHEN j.name = ANY(%(drop)s::text[]) THEN 'failed' ELSE 'dead' END,
        last_error = 'LEASE_LAPSED_FINAL_ATTEMPT', last_code = NULL,
        finished_at = to_timestamp(%(now)s / 1000.0), updated_at = to_timestamp(%(now)s / 1000.0),
        claim = NULL, lease_until = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM exhausted))
    RETURNING j.*
),
buried_counted AS (
    INSERT INTO x_job_counters AS c (job, width_ms, bucket, done, retried, failed, dead, duration_ms)
    SELECT name, 60000, to_timestamp((%(now)s - %(now)s %% 60000) / 1000.0), 0, 0,
           count(*) FILTER (WHERE state = 'failed'), count(*) FILTER (WHERE state = 'dead'), 0
    FROM buried GROUP BY name ORDER BY name  -- SQL_ACK's lock order on x_job_counters
    ON CONFLICT (job, width_ms, bucket) DO UPDATE
    SET failed = c.failed + excluded.failed, dead = c.dead + excluded.dead
),
claimed AS (
    UPDATE x_jobs j
    SET state = 'running', attempts = j.attempts + 1, worker_id = %(worker)s, claim = gen_random_uuid(),
        lease_until = to_timestamp((%(now)s + %(vt)s) / 1000.0), updated_at = to_timestamp(%(now)s / 1000.0),
        finished_at = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM take))  -- an array of ids: the primary key, never a scan of x_jobs
    RETURNING j.*
)
SELECT 'claimed' AS kind, {JOB_COLUMNS},
       (SELECT coalesce(json_agg(json_build_array({STEP_VALUES}) ORDER BY s.seq), '[]')
        FROM x_job_steps s WHERE s.job_id = j.id) AS steps
FROM claimed j
UNION ALL
SELECT 'buried' AS kind, {JOB_COLUMNS}, '[]'::json AS steps
FROM buried j
"""

# SQL_CLAIM — take up to %(caps)s[i] due rows of each queue %(queues)s[i] in ONE statement.
# First arm (x_jobs_claim_idx, walked in its own order, so the cost is the rows taken, not the rows
# waiting): ready/delayed/suspended rows whose run_at has passed, per queue in claim order (priority
# desc, run_at, id — ids are UUIDv7, so enqueue order), locked FOR UPDATE SKIP LOCKED so concurrent
# workers never take one row twice. Second arm (x_jobs_lease_idx): running rows
# whose lease lapsed (their worker died) are re-taken — except a row already at attempts >=
# max_attempts, which is BURIED in the same statement: dead (failed when its name is in %(drop)s),
# last_error LEASE_LAPSED_FINAL_ATTEMPT, counted, never handed out (worker_id keeps the worker whose
# lease lapsed). A queue with a row in
# x_job_paused_queues is read by no claim. Claimed rows get attempts + 1, this worker, a fresh claim
# token and a lease to now + %(vt)s; their completed steps ride back with them. Answers 'claimed' and
# 'buried' rows. When %(record)s is true the same statement upserts the claiming worker's registry row
# (x_workers; the w_* parameters), so an idle worker's registry costs no statement of its own.
SQL_CLAIM = f"""
WITH registry AS (
    {CLAIM_RECORD_WORKER}
),
wanted AS (
    SELECT c.queue, c.cap
    FROM unnest(%(queues)s::text[], %(caps)s::int[]) AS c(queue, cap)
    WHERE NOT EXISTS (SELECT 1 FROM x_job_paused_queues p WHERE p.queue = c.queue)
),
{CLAIM_ARMS},
locked AS (
    SELECT * FROM due UNION ALL SELECT * FROM lapsed
),
exhausted AS (
    SELECT id, name FROM locked WHERE state = 'running' AND attempts >= max_attempts
),
take AS (
    SELECT id FROM (
        SELECT id, cap, row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, id) AS rn
        FROM locked
        WHERE NOT (state = 'running' AND attempts >= max_attempts)
    ) ranked
    WHERE rn <= cap
),
{CLAIM_SETTLE}"""

# The wait histogram's bin edges (contracts.series.WAIT_EDGES_MS) as an array literal: width_bucket(wait,
# WAIT_EDGES) is the bin of a wait, as wait_bin() computes it.
WAIT_EDGES = "'{" + ",".join(str(edge) for edge in WAIT_EDGES_MS) + "}'::bigint[]"

# The 1-minute bucket containing %(now)s.
NOW_MINUTE = "to_timestamp((%(now)s - %(now)s %% 60000) / 1000.0)"


def run_bin_counts(duration: str) -> str:
    """Per run-time bin, how many of the grouped rows' ``duration`` (ms) fall in it."""
    return ", ".join(f"count(*) FILTER (WHERE width_bucket({duration}, {WAIT_EDGES}) = {i})" for i in range(WAIT_BINS))


# SQL_ACK — settle running rows done, each fenced on ITS OWN claim (state = 'running' AND worker_id
# AND claim): a body whose lease lapsed cannot settle the run that replaced it. The claim and lease are
# cleared; worker_id keeps the worker of this last attempt (what `jobs show` and django.tasks'
# worker_ids report) until the next claim replaces it. Moves the 1-minute x_job_counters bucket (done,
# duration, the run-time bins) in the same statement, and the queue's x_job_waits bins of the attempts
# whose wait (run time to start, ms) is given (NULL: none). Takes arrays, so one statement
# settles a batch. Answers the ids that landed. Its rows are found by the primary key (an array of ids,
# never a scan or a join over x_jobs) and locked in id order first,
# as SQL_HEARTBEAT locks them: a batch settling while the same worker's heartbeat renews an overlapping
# set of rows cannot deadlock with it.
SQL_ACK = f"""
WITH a AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(workers)s::text[], %(claims)s::text[], %(durations)s::bigint[],
                         %(waits)s::bigint[])
         AS a(id, worker_id, claim, duration_ms, wait_ms)
),
locked AS (SELECT j.id FROM x_jobs j WHERE j.id = ANY(%(ids)s::uuid[]) ORDER BY j.id FOR UPDATE OF j),
acked AS (
    UPDATE x_jobs j
    SET state = 'done', finished_at = to_timestamp(%(now)s / 1000.0), updated_at = to_timestamp(%(now)s / 1000.0),
        claim = NULL, lease_until = NULL
    FROM a
    WHERE j.id = ANY(ARRAY(SELECT id FROM locked)) AND j.id = a.id
      AND j.state = 'running' AND j.worker_id = a.worker_id AND j.claim::text = a.claim
    RETURNING j.id, j.name, j.queue, a.duration_ms, a.wait_ms
),
counted AS (
    INSERT INTO x_job_counters AS c (job, width_ms, bucket, done, retried, failed, dead, duration_ms, {RUN_BINS})
    SELECT name, 60000, {NOW_MINUTE}, count(*), 0, 0, 0, sum(duration_ms), {run_bin_counts("duration_ms")}
    FROM acked GROUP BY name ORDER BY name  -- rows locked in one order: two batches' upserts cannot deadlock
    ON CONFLICT (job, width_ms, bucket) DO UPDATE
    SET done = c.done + excluded.done, duration_ms = c.duration_ms + excluded.duration_ms, {run_bins_added("c.")}
),
waited AS (
    INSERT INTO x_job_waits AS w (queue, width_ms, bucket, bin, count)
    SELECT queue, 60000, {NOW_MINUTE}, width_bucket(wait_ms, {WAIT_EDGES}), count(*)
    FROM acked WHERE wait_ms IS NOT NULL GROUP BY 1, 4 ORDER BY 1, 4  -- one lock order, as counted's
    ON CONFLICT (queue, width_ms, bucket, bin) DO UPDATE SET count = w.count + excluded.count
)
SELECT id FROM acked
"""

# SQL_NACK — settle one running row by nack_state() (%(state)s: ready, suspended, failed or dead),
# fenced on the claim; the claim and lease are cleared, worker_id kept (as SQL_ACK). %(uncount)s hands
# the attempt back (a suspension, a drain, a shed). %(run_at)s is when it is due again (NULL: now for
# ready, unchanged otherwise). %(counter)s names the counter column moved in the same statement (NULL
# for an uncounted hand-back), and a counted one with %(wait)s (run time to start, ms) moves its queue's
# x_job_waits bin too. Announces the queue when the row is ready and due now. Answers the id
# when it landed.
SQL_NACK = f"""
WITH nacked AS (
    UPDATE x_jobs j
    SET state = %(state)s,
        attempts = greatest(0, j.attempts - %(uncount)s),
        run_at = coalesce(to_timestamp(%(run_at)s / 1000.0),
                          CASE WHEN %(state)s = 'ready' THEN to_timestamp(%(now)s / 1000.0) ELSE j.run_at END),
        last_error = coalesce(%(error)s, j.last_error),
        last_code = CASE WHEN %(error)s IS NULL THEN j.last_code ELSE %(code)s END,
        finished_at = CASE WHEN %(state)s IN ('dead', 'failed') THEN to_timestamp(%(now)s / 1000.0) END,
        updated_at = to_timestamp(%(now)s / 1000.0),
        claim = NULL, lease_until = NULL
    WHERE j.id = %(id)s AND j.state = 'running' AND j.worker_id = %(worker)s AND j.claim::text = %(claim)s
    RETURNING j.id, j.name, j.queue, j.state, j.run_at
),
waited AS (
    INSERT INTO x_job_waits AS w (queue, width_ms, bucket, bin, count)
    SELECT queue, 60000, {NOW_MINUTE}, width_bucket(%(wait)s::bigint, {WAIT_EDGES}), 1
    FROM nacked WHERE %(counter)s::text IS NOT NULL AND %(wait)s::bigint IS NOT NULL
    ON CONFLICT (queue, width_ms, bucket, bin) DO UPDATE SET count = w.count + excluded.count
),
counted AS (
    INSERT INTO x_job_counters AS c (job, width_ms, bucket, done, retried, failed, dead, duration_ms, {RUN_BINS})
    SELECT name, 60000, to_timestamp((%(now)s - %(now)s %% 60000) / 1000.0), 0,
           (%(counter)s = 'retried')::int, (%(counter)s = 'failed')::int, (%(counter)s = 'dead')::int,
           coalesce(%(duration)s, 0), {run_bin_counts("coalesce(%(duration)s, 0)::bigint")}
    FROM nacked WHERE %(counter)s IS NOT NULL
    GROUP BY name
    ON CONFLICT (job, width_ms, bucket) DO UPDATE
    SET retried = c.retried + excluded.retried, failed = c.failed + excluded.failed,
        dead = c.dead + excluded.dead, duration_ms = c.duration_ms + excluded.duration_ms, {run_bins_added("c.")}
),
wake AS (
    SELECT pg_notify('{WAKE_CHANNEL}', queue) FROM nacked
    WHERE state = 'ready' AND run_at <= to_timestamp(%(now)s / 1000.0)
)
SELECT id FROM nacked CROSS JOIN (SELECT count(*) FROM wake) announced
"""

# SQL_HEARTBEAT — renew every in-flight lease of a worker in ONE statement, each fenced on its claim.
# Answers the ids whose renewal landed; a missing id was cancelled or re-claimed. Its rows are locked in
# id order first, as SQL_ACK's are (see there): the two once deadlocked with hundreds of async runs in flight.
SQL_HEARTBEAT = """
WITH h AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(workers)s::text[], %(claims)s::text[]) AS h(id, worker_id, claim)
),
locked AS (SELECT j.id FROM x_jobs j WHERE j.id = ANY(%(ids)s::uuid[]) ORDER BY j.id FOR UPDATE OF j)
UPDATE x_jobs j
SET lease_until = to_timestamp((%(now)s + %(vt)s) / 1000.0)
FROM h
WHERE j.id = ANY(ARRAY(SELECT id FROM locked)) AND j.id = h.id
  AND j.state = 'running' AND j.worker_id = h.worker_id AND j.claim::text = h.claim
RETURNING j.id
"""

# SQL_SAVE_STEP — persist one step under the claim (x_job_steps_job_name_uniq): written only while
# the job is running under this worker and claim; a replayed name overwrites its own row.
SQL_SAVE_STEP = """
INSERT INTO x_job_steps AS s (job_id, name, seq, status, output, started_at, finished_at, wake_at, meta)
SELECT %(id)s, %(name)s, %(seq)s, %(status)s, %(output)s::jsonb, to_timestamp(%(started)s / 1000.0),
       to_timestamp(%(finished)s / 1000.0), to_timestamp(%(wake)s / 1000.0), %(meta)s::jsonb
WHERE EXISTS (
    SELECT 1 FROM x_jobs j
    WHERE j.id = %(id)s AND j.state = 'running' AND j.worker_id = %(worker)s AND j.claim::text = %(claim)s
)
ON CONFLICT (job_id, name) DO UPDATE
SET seq = excluded.seq, status = excluded.status, output = excluded.output, started_at = excluded.started_at,
    finished_at = excluded.finished_at, wake_at = excluded.wake_at, meta = excluded.meta
RETURNING s.id
"""

# SQL_SAVE_STEP_HELD — SQL_SAVE_STEP for run.step.atomic(), inside the caller's transaction: the job's
# row is locked (FOR NO KEY UPDATE, by its primary key) while the fence is read, and stays locked until
# that transaction ends. A claim that would take the row over waits for it (or, SKIP LOCKED, passes it by);
# one that committed first changed the claim, so nothing is written and the caller rolls back. Either way
# the checkpoint and the step's own writes commit only under this worker's claim.
SQL_SAVE_STEP_HELD = """
WITH owned AS (
    SELECT j.id FROM x_jobs j
    WHERE j.id = %(id)s AND j.state = 'running' AND j.worker_id = %(worker)s AND j.claim::text = %(claim)s
    FOR NO KEY UPDATE OF j
)
INSERT INTO x_job_steps AS s (job_id, name, seq, status, output, started_at, finished_at, wake_at, meta)
SELECT o.id, %(name)s, %(seq)s, %(status)s, %(output)s::jsonb, to_timestamp(%(started)s / 1000.0),
       to_timestamp(%(finished)s / 1000.0), to_timestamp(%(wake)s / 1000.0), %(meta)s::jsonb
FROM owned o
ON CONFLICT (job_id, name) DO UPDATE
SET seq = excluded.seq, status = excluded.status, output = excluded.output, started_at = excluded.started_at,
    finished_at = excluded.finished_at, wake_at = excluded.wake_at, meta = excluded.meta
RETURNING s.id
"""

# SQL_RECORD_PROGRESS — write run.progress(), fenced on the claim like every settle (state = 'running'
# AND worker_id AND claim): a body whose lease lapsed cannot report on the run that replaced it.
# Primary key. Answers the id when it landed.
SQL_RECORD_PROGRESS = """
UPDATE x_jobs j
SET progress = %(progress)s::jsonb
WHERE j.id = %(id)s AND j.state = 'running' AND j.worker_id = %(worker)s AND j.claim::text = %(claim)s
RETURNING j.id
"""

# SQL_RECORD_WORKER — upsert a worker's registry row (primary key): the whole row is replaced, the
# heartbeat included. The caller truncates in_flight to MAX_WORKER_IN_FLIGHT ids.
SQL_RECORD_WORKER = RECORD_WORKER_UPSERT

# SQL_REMOVE_WORKER — drop a worker's registry row (a clean shutdown); an unknown id is a no-op.
SQL_REMOVE_WORKER = "DELETE FROM x_workers WHERE id = %(id)s"

# SQL_STATS — per queue, the count of each LIVE state and the oldest due ready row, the dead-letter queue's
# size, and whether the queue is paused. Every count is a range of x_jobs_state_queue_idx (state leads it),
# so finished rows cost nothing however long the history grows, and no index exists for the stats alone
# (each one more is an insert on every claim and settle). done, failed and cancelled rows are not counted:
# a scrape must not slow as history grows (the settle counters say how many jobs finished:
# SQL_COUNTER_TOTALS); dead rows are, and retention bounds them.
SQL_STATS = """
SELECT q.queue, q.state, q.n, q.oldest, (p.queue IS NOT NULL)
FROM (
    SELECT queue, state, count(*) AS n,
           (extract(epoch from min(run_at) FILTER (
               WHERE state IN ('ready', 'delayed') AND run_at <= to_timestamp(%(now)s / 1000.0))) * 1000)::bigint
               AS oldest
    FROM x_jobs
    WHERE state IN ('ready', 'delayed', 'running', 'suspended')
    GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*), NULL::bigint FROM x_jobs WHERE state = 'dead' GROUP BY queue, state
) q
LEFT JOIN x_job_paused_queues p ON p.queue = q.queue
ORDER BY q.queue, q.state
"""

# SQL_PURGE_FINISHED — retention: delete at most %(limit)s finished rows and their steps in ONE short
# statement. %(states)s[i] rows finished before %(before)s[i] (epoch ms) go, oldest created first. It needs
# no index of its own (one more would be an insert on every settle): a row finished before the cutoff was
# created before it, so each (state, queue) pair is one range of x_jobs_state_queue_idx (state, queue,
# created_at) below the cutoff, with finished_at re-checked on the few rows that finished after it. The
# pairs come from a skip scan of that index (the recursive CTE ``pairs``: one index probe per queue),
# so neither live rows nor other states' rows are read. Steps go by x_job_steps_job_seq_idx. The delete
# re-checks the state and the instant, so a row requeued while the statement ran stays. Answers how many
# rows went; the caller runs it again while a batch comes back full, so no purge holds one long
# transaction. Run after SQL_JIT_OFF in the same transaction: the planner's estimate for the per-pair
# ranges crosses jit_above_cost, and compiling the plan took over a second of a 2 ms delete.
SQL_PURGE_FINISHED = """
WITH RECURSIVE cutoff AS (
    SELECT c.state, to_timestamp(c.before_ms / 1000.0) AS before
    FROM unnest(%(states)s::text[], %(before)s::bigint[]) AS c(state, before_ms)
    WHERE c.state IN ('done', 'failed', 'dead', 'cancelled')
),
pairs AS (
    SELECT c.state, c.before, (SELECT j.queue FROM x_jobs j WHERE j.state = c.state ORDER BY j.queue LIMIT 1) AS queue
    FROM cutoff c
    UNION ALL
    SELECT p.state, p.before,
           (SELECT j.queue FROM x_jobs j WHERE j.state = p.state AND j.queue > p.queue ORDER BY j.queue LIMIT 1)
    FROM pairs p
    WHERE p.queue IS NOT NULL
),
picked AS (
    SELECT e.id
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT j.id, j.created_at
        FROM x_jobs j
        WHERE j.state = p.state AND j.queue = p.queue AND j.created_at < p.before AND j.finished_at < p.before
        ORDER BY j.state, j.queue, j.created_at  -- the index's order: state and queue are fixed here
        LIMIT %(limit)s
    ) e
    WHERE p.queue IS NOT NULL
    ORDER BY e.created_at, e.id
    LIMIT %(limit)s
),
gone AS (
    DELETE FROM x_jobs j USING picked p, cutoff c
    WHERE j.id = p.id AND j.state = c.state AND j.state IN ('done', 'failed', 'dead', 'cancelled')
      AND j.finished_at < c.before
    RETURNING j.id
),
steps AS (
    DELETE FROM x_job_steps s USING gone g WHERE s.job_id = g.id
)
SELECT count(*) FROM gone
"""

# SQL_JIT_OFF — no JIT compilation for the rest of the transaction (SQL_PURGE_FINISHED's).
SQL_JIT_OFF = "SET LOCAL jit = off"

# SQL_RATE_TAKE — one take of rate key %(key)s by %(holder)s (a job id), every %(interval)s ms a start, by a
# caller that waits up to %(near)s ms itself, as drivers/rates.py's decide(): a reservation of the holder's due
# within %(near)s (or past, within one interval) is spent; one further ahead is kept and answered; else the
# key's next free instant is taken (x_job_rates, upserted: the row lock serialises every taker of one key),
# the schedule moves one interval past it, and an instant more than %(near)s ahead of %(now)s is reserved for
# the holder (x_job_rate_holds). Answers the ms to wait for the instant it starts on, 0 for now. With
# %(lagged)s (the caller's clock is wall time), the key's instant is decided when its row lock is held: never
# before %(now)s plus the time the statement waited for it (clock_timestamp() - statement_timestamp(), one
# server's clock, so no skew) — a take queued behind the key's other takers hands out no instant that passed
# meanwhile. The answer and the %(near)s test still count from %(now)s, which the caller waits from.
SQL_RATE_TAKE = """
WITH held AS (
    SELECT at_ms FROM x_job_rate_holds
    WHERE key = %(key)s AND holder = %(holder)s AND at_ms > %(now)s - %(interval)s
),
fresh AS (
    INSERT INTO x_job_rates AS r (key, next_at_ms)
    SELECT %(key)s, %(now)s + %(interval)s WHERE NOT EXISTS (SELECT 1 FROM held)
    ON CONFLICT (key) DO UPDATE SET next_at_ms = greatest(
        r.next_at_ms,
        %(now)s + CASE WHEN %(lagged)s
            THEN greatest(0, floor(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000))::bigint
            ELSE 0 END
    ) + %(interval)s
    RETURNING next_at_ms - %(interval)s AS at_ms
),
kept AS (
    INSERT INTO x_job_rate_holds AS h (key, holder, at_ms)
    SELECT %(key)s, %(holder)s, at_ms FROM fresh WHERE at_ms > %(now)s + %(near)s
    ON CONFLICT (key, holder) DO UPDATE SET at_ms = excluded.at_ms
),
spent AS (
    DELETE FROM x_job_rate_holds
    WHERE key = %(key)s AND holder = %(holder)s
      AND (EXISTS (SELECT 1 FROM held WHERE at_ms <= %(now)s + %(near)s)
           OR EXISTS (SELECT 1 FROM fresh WHERE at_ms <= %(now)s + %(near)s))
)
SELECT greatest(0, coalesce((SELECT at_ms FROM fresh), (SELECT at_ms FROM held)) - %(now)s)::bigint
"""

# SQL_RATE_STATE — every rate key's next free instant and its reservations, by key (at most 1,000 keys).
SQL_RATE_STATE = """
SELECT r.key, r.next_at_ms, (SELECT count(*) FROM x_job_rate_holds h WHERE h.key = r.key)
FROM x_job_rates r
ORDER BY r.key
LIMIT 1000
"""

# SQL_RATE_FORGET — drop the schedules and reservations whose instant is before %(before)s; answers how
# many rows went.
SQL_RATE_FORGET = """
WITH schedules AS (DELETE FROM x_job_rates WHERE next_at_ms < %(before)s RETURNING 1),
holds AS (DELETE FROM x_job_rate_holds WHERE at_ms < %(before)s RETURNING 1)
SELECT (SELECT count(*) FROM schedules) + (SELECT count(*) FROM holds)
"""

# SQL_LEASE_LOCK — serialise acquirers of one key for the rest of the transaction (an advisory
# xact lock is released at commit; it never outlives the statement's transaction).
SQL_LEASE_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 7041))"

# SQL_LEASE_ACQUIRE — take a slot of %(key)s for %(holder)s when fewer than %(limit)s OTHER live
# holders exist (x_job_leases_key_idx); a holder that already has a live slot just renews it; a
# holder whose slot lapsed goes to the back of the slot order. Lapsed slots of others are purged.
# Run after SQL_LEASE_LOCK in one transaction. Answers true when the holder holds a slot.
SQL_LEASE_ACQUIRE = """
WITH purge AS (
    DELETE FROM x_job_leases
    WHERE key = %(key)s AND holder <> %(holder)s AND expires_at <= to_timestamp(%(now)s / 1000.0)
),
mine AS (
    UPDATE x_job_leases SET expires_at = to_timestamp((%(now)s + %(ttl)s) / 1000.0)
    WHERE key = %(key)s AND holder = %(holder)s AND expires_at > to_timestamp(%(now)s / 1000.0)
    RETURNING 1
),
others AS (
    SELECT count(*) AS n FROM x_job_leases
    WHERE key = %(key)s AND holder <> %(holder)s AND expires_at > to_timestamp(%(now)s / 1000.0)
),
taken AS (
    INSERT INTO x_job_leases AS l (key, holder, acquired_at, expires_at)
    SELECT %(key)s, %(holder)s, to_timestamp(%(now)s / 1000.0), to_timestamp((%(now)s + %(ttl)s) / 1000.0)
    WHERE NOT EXISTS (SELECT 1 FROM mine) AND (SELECT n FROM others) < %(limit)s
    ON CONFLICT (key, holder) DO UPDATE SET acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM mine) OR EXISTS (SELECT 1 FROM taken)
"""

# SQL_LEASE_RENEW — extend a live slot; a lapsed or taken one answers no row.
SQL_LEASE_RENEW = """
UPDATE x_job_leases SET expires_at = to_timestamp((%(now)s + %(ttl)s) / 1000.0)
WHERE key = %(key)s AND holder = %(holder)s AND expires_at > to_timestamp(%(now)s / 1000.0)
RETURNING id
"""

# SQL_LEASE_RELEASE — give a slot back (a holder holding nothing is a no-op).
SQL_LEASE_RELEASE = "DELETE FROM x_job_leases WHERE key = %(key)s AND holder = %(holder)s"

# SQL_LEASE_HOLDERS — the live holders of one key, in slot order.
SQL_LEASE_HOLDERS = """
SELECT holder FROM x_job_leases
WHERE key = %(key)s AND expires_at > to_timestamp(%(now)s / 1000.0)
ORDER BY acquired_at, id
"""

# SQL_WAKE_PROBE — the probe that proves a LISTEN session: sent through the pool, it must come back
# on the session (see wake.py).
SQL_WAKE_PROBE = f"SELECT pg_notify('{WAKE_CHANNEL}', %(payload)s)"
