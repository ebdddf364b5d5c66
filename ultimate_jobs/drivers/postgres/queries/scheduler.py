"""Every statement of the scheduler's storage — the leader lease, the watermarks and the fire — and of the
counter rollup the leader owes, verbatim, one constant each (``driver.leader``, ``driver.scheduler_state``
and ``driver.rollup_counters()``).

The conventions of :mod:`.jobs` hold here too: named parameters, the caller's clock injected as epoch ms
and converted with ``to_timestamp(%(now)s / 1000.0)`` (no statement compares with the server's
``now()``), times read back as epoch ms. The enqueue half of ``SQL_SCHEDULER_FIRE`` is ``SQL_ENQUEUE``'s
own request recordset and insert (ENQUEUE_RECORDSET, INSERT_JOBS_FROM_REQ), with its wake channel and
horizon; the leader's rollup is ``SQL_ROLLUP_COUNTERS``'s own CTEs (ROLLUP_COUNTERS_CTES), written once
here.
"""

from __future__ import annotations

from ....contracts.series import COUNTER_TIERS, SAMPLE_KEEP_MS, WAIT_BINS
from ...sql.clauses import LEASE_TAKEOVER, RUN_BINS, run_bins_added
from .jobs import ENQUEUE_RECORDSET, INSERT_JOBS_FROM_REQ, NOW_MINUTE, WAKE_CHANNEL, WAKE_DUE_WITHIN_MS

__all__ = [
    "SQL_LEADER_ACQUIRE",
    "SQL_LEADER_ACQUIRE_ROLLUP",
    "SQL_LEADER_CURRENT",
    "SQL_LEADER_RELEASE",
    "SQL_ROLLUP_COUNTERS",
    "SQL_SCHEDULER_FIRE",
    "SQL_SCHEDULER_LOAD",
    "SQL_SCHEDULER_WATERMARKS",
]

# -- the counter rollup (the leader's upkeep) ------------------------------------------------------

_TIERS = ", ".join(f"({width}, {keep})" for width, keep in COUNTER_TIERS)

# The counter rollup's one algorithm, as CTEs every rollup statement shares (SQL_ROLLUP_COUNTERS, and
# SQL_LEADER_ACQUIRE_ROLLUP below): the statement defines ``rollup_gate`` before them — a
# relation that is empty when the rollup must not run. Every bucket past its tier's retention
# (COUNTER_TIERS: 1-minute kept 24 h, 5-minute 7 d, 1-hour 30 d; a bucket is past it once it ENDED
# keep ms or more before %(now)s) is deleted, and its counts are added into the narrowest wider tier
# whose bucket containing it is still inside that tier's retention — the state folding tier by tier
# reaches, in one step — or dropped when none is. A destination bucket is never one the statement
# deletes, so no row is touched twice. Idempotent: a folded bucket is gone (x_job_counters_bucket_uniq,
# ON CONFLICT adds). ``expired`` holds the buckets folded or dropped. The queues' wait histograms
# (x_job_waits, a row per bin) fold the same way in the same statement, and the queues' depth is sampled
# (x_job_queue_samples: per queue the rows waiting and the oldest due row's age — ranges of
# x_jobs_state_queue_idx, as SQL_STATS reads — and the minute's "" marker; the most of each kept per
# minute), samples older than SAMPLE_KEEP_MS deleted.
# The run-time bins an expired counter row returns (c.run_bin_<i>), and their sums over the placed rows p.
RETURNED_RUN_BINS = ", ".join(f"c.run_bin_{i}" for i in range(WAIT_BINS))
FOLDED_RUN_BINS = ", ".join(f"sum(p.run_bin_{i})" for i in range(WAIT_BINS))

# The width of the narrowest wider tier still retaining the expired bucket ``e`` at %(now)s (NULL: none).
FOLD_DESTINATION = """(
    SELECT t.width_ms FROM tiers t
    WHERE t.width_ms > e.width_ms AND e.bucket_ms - mod(e.bucket_ms, t.width_ms) + t.width_ms > %(now)s - t.keep_ms
    ORDER BY t.width_ms
    LIMIT 1
)"""

ROLLUP_COUNTERS_CTES = f"""tiers AS (
    SELECT * FROM (VALUES {_TIERS}) AS t(width_ms, keep_ms)
),
expired AS (
    DELETE FROM x_job_counters c
    USING tiers t
    WHERE EXISTS (SELECT 1 FROM rollup_gate) AND c.width_ms = t.width_ms
      AND c.bucket + c.width_ms * interval '1 millisecond' <= to_timestamp((%(now)s - t.keep_ms) / 1000.0)
    RETURNING c.job, c.width_ms, (extract(epoch from c.bucket) * 1000)::bigint AS bucket_ms,
              c.done, c.retried, c.failed, c.dead, c.duration_ms, {RETURNED_RUN_BINS}
),
placed AS (
    SELECT e.*, {FOLD_DESTINATION} AS dest FROM expired e
),
folded AS (
    INSERT INTO x_job_counters AS c (job, width_ms, bucket, done, retried, failed, dead, duration_ms, {RUN_BINS})
    SELECT p.job, p.dest, to_timestamp((p.bucket_ms - mod(p.bucket_ms, p.dest)) / 1000.0),
           sum(p.done), sum(p.retried), sum(p.failed), sum(p.dead), sum(p.duration_ms), {FOLDED_RUN_BINS}
    FROM placed p
    WHERE p.dest IS NOT NULL
    GROUP BY p.job, p.dest, p.bucket_ms - mod(p.bucket_ms, p.dest)
    ON CONFLICT (job, width_ms, bucket) DO UPDATE
    SET done = c.done + excluded.done, retried = c.retried + excluded.retried, failed = c.failed + excluded.failed,
        dead = c.dead + excluded.dead, duration_ms = c.duration_ms + excluded.duration_ms, {run_bins_added("c.")}
),
expired_waits AS (
    DELETE FROM x_job_waits w
    USING tiers t
    WHERE EXISTS (SELECT 1 FROM rollup_gate) AND w.width_ms = t.width_ms
      AND w.bucket + w.width_ms * interval '1 millisecond' <= to_timestamp((%(now)s - t.keep_ms) / 1000.0)
    RETURNING w.queue, w.width_ms, (extract(epoch from w.bucket) * 1000)::bigint AS bucket_ms, w.bin, w.count
),
folded_waits AS (
    INSERT INTO x_job_waits AS w (queue, width_ms, bucket, bin, count)
    SELECT p.queue, p.dest, to_timestamp((p.bucket_ms - mod(p.bucket_ms, p.dest)) / 1000.0), p.bin, sum(p.count)
    FROM (SELECT e.*, {FOLD_DESTINATION} AS dest FROM expired_waits e) p
    WHERE p.dest IS NOT NULL
    GROUP BY p.queue, p.dest, p.bucket_ms - mod(p.bucket_ms, p.dest), p.bin
    ON CONFLICT (queue, width_ms, bucket, bin) DO UPDATE SET count = w.count + excluded.count
),
sampled AS (
    INSERT INTO x_job_queue_samples AS s (bucket, queue, depth, oldest_age_ms)
    SELECT {NOW_MINUTE}, d.queue, d.depth, d.oldest_age_ms
    FROM (
        SELECT j.queue, count(*) AS depth,
               (%(now)s - extract(epoch from min(j.run_at) FILTER (
                   WHERE j.run_at <= to_timestamp(%(now)s / 1000.0))) * 1000)::bigint AS oldest_age_ms
        FROM x_jobs j
        WHERE j.state IN ('ready', 'delayed')
        GROUP BY j.queue
        UNION ALL
        SELECT '', 0, NULL
    ) d
    WHERE EXISTS (SELECT 1 FROM rollup_gate)
    ON CONFLICT (bucket, queue) DO UPDATE
    SET depth = greatest(s.depth, excluded.depth), oldest_age_ms = greatest(s.oldest_age_ms, excluded.oldest_age_ms)
),
expired_samples AS (
    DELETE FROM x_job_queue_samples s
    WHERE EXISTS (SELECT 1 FROM rollup_gate) AND s.bucket < to_timestamp((%(now)s - {SAMPLE_KEEP_MS}) / 1000.0)
)"""

# SQL_ROLLUP_COUNTERS — driver.rollup_counters(): the rollup (ROLLUP_COUNTERS_CTES, always gated
# open) at %(now)s, in ONE statement. Answers how many buckets were folded or dropped.
SQL_ROLLUP_COUNTERS = f"""
WITH rollup_gate AS (SELECT 1),
{ROLLUP_COUNTERS_CTES}
SELECT count(*) FROM expired
"""

# -- the leader lease ------------------------------------------------------------------------------

# The lease upsert both acquire statements share: take or renew the lease %(name)s for %(holder)s until
# now + %(ttl)s (primary key). It lands when the row is absent, already this holder's, or expired; a
# live lease of another holder is left alone and the upsert answers no row. Concurrent acquirers
# serialise on the row lock (ON CONFLICT re-checks the WHERE against the committed row), so one wins. A
# renewal of a live lease keeps its acquired_at; a new term (a fresh row, a takeover, a lapsed lease
# re-taken) starts it at now. Answers the lease as epoch ms.
_LEASE_UPSERT = f"""INSERT INTO x_job_scheduler_leases AS l (name, holder, acquired_at, expires_at)
VALUES (%(name)s, %(holder)s, to_timestamp(%(now)s / 1000.0), to_timestamp((%(now)s + %(ttl)s) / 1000.0))
{LEASE_TAKEOVER}
RETURNING l.name, l.holder, (extract(epoch from l.acquired_at) * 1000)::bigint AS acquired_at,
          (extract(epoch from l.expires_at) * 1000)::bigint AS expires_at"""

# SQL_LEADER_ACQUIRE — driver.leader.acquire(): the lease upsert above, alone. Answers the lease (name,
# holder, acquired_at ms, expires_at ms), or no row while another holder's lease is live.
SQL_LEADER_ACQUIRE = _LEASE_UPSERT

# SQL_LEADER_ACQUIRE_ROLLUP — driver.leader.acquire(rollup=True): the lease upsert and, only when the
# lease landed (rollup_gate is the landed lease), the counter rollup of SQL_ROLLUP_COUNTERS at %(now)s
# in the same statement: what the leader sends once a minute instead of a plain renewal, so an idle
# scheduler spends nothing beyond its renewals. Answers the lease and the buckets folded or dropped,
# or no row while another holder's lease is live (then nothing was folded).
SQL_LEADER_ACQUIRE_ROLLUP = f"""
WITH lease AS (
    {_LEASE_UPSERT}
),
rollup_gate AS (SELECT 1 FROM lease),
{ROLLUP_COUNTERS_CTES}
SELECT name, holder, acquired_at, expires_at, (SELECT count(*) FROM expired) FROM lease
"""

# SQL_LEADER_RELEASE — hand the lease back (a clean stop): a standby takes it at its next ask rather
# than after the TTL. Only this holder's row (primary key); a lease another holder took meanwhile is
# left alone. Answers a row when one was released.
SQL_LEADER_RELEASE = "DELETE FROM x_job_scheduler_leases WHERE name = %(name)s AND holder = %(holder)s RETURNING 1"

# SQL_LEADER_CURRENT — the stored lease of %(name)s, live or lapsed (primary key).
SQL_LEADER_CURRENT = """
SELECT name, holder, (extract(epoch from acquired_at) * 1000)::bigint AS acquired_at,
       (extract(epoch from expires_at) * 1000)::bigint AS expires_at
FROM x_job_scheduler_leases
WHERE name = %(name)s
"""

# -- the watermarks --------------------------------------------------------------------------------

# SQL_SCHEDULER_LOAD — what a scheduler reads once when it becomes leader: the watermark of every task
# in %(tasks)s, arming the ones that have none at now (arming moves the watermark and is not a fire).
# Primary key; ON CONFLICT DO NOTHING leaves a watermark another scheduler armed first — the
# statement's snapshot cannot show that row, so the caller re-reads a task it did not get back
# (SQL_SCHEDULER_WATERMARKS). Answers (task, watermark ms, armed now).
SQL_SCHEDULER_LOAD = """
WITH armed AS (
    INSERT INTO x_job_task_watermarks (task, watermark, updated_at)
    SELECT t.task, to_timestamp(%(now)s / 1000.0), to_timestamp(%(now)s / 1000.0)
    FROM unnest(%(tasks)s::text[]) AS t(task)
    ON CONFLICT (task) DO NOTHING
    RETURNING task, watermark
)
SELECT w.task, (extract(epoch from w.watermark) * 1000)::bigint, false
FROM x_job_task_watermarks w
WHERE w.task = ANY(%(tasks)s::text[])
UNION ALL
SELECT a.task, (extract(epoch from a.watermark) * 1000)::bigint, true
FROM armed a
"""

# SQL_SCHEDULER_WATERMARKS — the stored watermarks of %(tasks)s (primary key).
SQL_SCHEDULER_WATERMARKS = """
SELECT task, (extract(epoch from watermark) * 1000)::bigint
FROM x_job_task_watermarks
WHERE task = ANY(%(tasks)s::text[])
"""

# -- the fire --------------------------------------------------------------------------------------

# SQL_SCHEDULER_FIRE — fire ONE occurrence in ONE statement. The fence: the watermark of %(task)s moves
# to %(watermark)s only while it still holds %(previous)s — the value the firing scheduler read — and
# the task is not paused (x_job_paused_tasks, primary key); a second scheduler firing the same
# occurrence waits on the row lock, re-reads the moved row and matches nothing. Then the occurrence's
# job rows are inserted and the fire is recorded in x_job_task_fires (one row per task, primary key) —
# all or none, so a crash cannot fire an occurrence twice and a refused fence writes nothing. The rows
# are SQL_ENQUEUE's shape and rules: nothing is inserted under an id that already names a row, nor under
# a (name, tenant, idempotency key) a live row holds (x_jobs_name_tenant_idempotency_live_idx) — ON
# CONFLICT DO NOTHING covers both. Each queue the occurrence filled with a row due within
# WAKE_DUE_WITHIN_MS is announced once with pg_notify('x_jobs_wake', queue); a refused fire announces
# nothing. Answers (moved, paused, inserted, announced).
SQL_SCHEDULER_FIRE = f"""
WITH moved AS (
    UPDATE x_job_task_watermarks w
    SET watermark = to_timestamp(%(watermark)s / 1000.0), updated_at = to_timestamp(%(now)s / 1000.0)
    WHERE w.task = %(task)s AND w.watermark = to_timestamp(%(previous)s / 1000.0)
      AND NOT EXISTS (SELECT 1 FROM x_job_paused_tasks p WHERE p.task = %(task)s)
    RETURNING w.task
),
req AS (
    SELECT r.*
    FROM {ENQUEUE_RECORDSET}
    WHERE EXISTS (SELECT 1 FROM moved)
),
ins AS (
    {INSERT_JOBS_FROM_REQ}
    RETURNING queue, run_at
),
fired AS (
    INSERT INTO x_job_task_fires AS f (task, occurrence_at, fired_at)
    SELECT task, to_timestamp(%(occurrence)s / 1000.0), to_timestamp(%(now)s / 1000.0) FROM moved
    ON CONFLICT (task) DO UPDATE SET occurrence_at = excluded.occurrence_at, fired_at = excluded.fired_at
),
wake AS (
    SELECT pg_notify('{WAKE_CHANNEL}', q.queue)
    FROM (SELECT DISTINCT queue FROM ins WHERE run_at <= to_timestamp((%(now)s + {WAKE_DUE_WITHIN_MS}) / 1000.0)) q
)
SELECT (SELECT count(*) FROM moved),
       EXISTS (SELECT 1 FROM x_job_paused_tasks p WHERE p.task = %(task)s),
       (SELECT count(*) FROM ins),
       (SELECT count(*) FROM wake)
"""
