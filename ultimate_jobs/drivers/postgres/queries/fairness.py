"""Fair queues on Postgres: the lanes' rotation (``x_job_turns``), the trigger that files a lane, and the
claim that serves the lanes in turn.

A row of a fair queue carries its lane (``x_jobs.lane``: its tenant, ``''`` for none). ``x_job_turns`` holds
one row per lane: an active lane has a ``turn_at`` (when it last took its turn, or joined the rotation); a
lane with nothing due has none, and ``wake_at`` says when its first waiting row falls due (``NULL``: it
has none). A claim serves the lanes whose turn is oldest — a waking lane's turn is its ``wake_at`` — so
"least recently served first" holds across the lanes that were active and the lanes that just woke. The
trigger files a lane whenever a row of it becomes waiting (an enqueue, a retry, a resume, a promote —
every path, since it is the table's own); the claim wakes, serves and retires lanes.

The race the trigger closes: a claim that finds a lane empty retires it, while an enqueue of that lane may
not be committed yet (the claim cannot see its row). The trigger takes the active lane's row ``FOR SHARE``
until the enqueue's transaction ends, so the claim — which takes its lanes ``FOR UPDATE SKIP LOCKED`` —
skips that lane instead of retiring it; an enqueue that finds its lane retired files it again under the
row lock of its upsert. Share locks do not conflict with each other: one org's concurrent enqueues never
wait on each other.
"""

from __future__ import annotations

from .jobs import CLAIM_ARMS, CLAIM_RECORD_WORKER, CLAIM_SETTLE


# SQL_CLAIM's arms, the due one read only for a queue whose lanes did not fill its batch (a fair queue whose
# lanes filled it reads no row of the queue's order at all; one whose lanes fell short reads the whole cap,
# since the queue's first rows may be the lanes' own).
def _replace_once(text: str, old: str, new: str) -> str:
    """``text`` with its one ``old`` replaced by ``new``; a text that holds ``old`` other than once (it drifted)
    fails at import, never as a statement that silently lost its change."""
    if text.count(old) != 1:
        raise RuntimeError(f"the statement to derive from holds {text.count(old)} of {old!r}, not one")
    return text.replace(old, new)


FILL_ARMS = _replace_once(
    CLAIM_ARMS,
    "LIMIT w.cap\n",
    "LIMIT CASE WHEN (SELECT count(*) FROM lanes l WHERE l.queue = w.queue) >= w.cap THEN 0 ELSE w.cap END\n",
)

# SQL_CREATE_TURN_TRIGGER — the trigger function and the trigger on x_jobs (0011).
# The WHEN clause keeps it off every row of a queue that is not fair (lane IS NULL): those cost nothing.
SQL_CREATE_TURN_TRIGGER = """
CREATE OR REPLACE FUNCTION x_job_turn_file() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- an active lane: hold it until this transaction ends, so no claim retires it meanwhile
    PERFORM 1 FROM x_job_turns t WHERE t.queue = NEW.queue AND t.lane = NEW.lane AND t.turn_at IS NOT NULL FOR SHARE;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    -- a new or waiting lane: wake it at this row's run time if that is sooner (a claim gives it its turn)
    INSERT INTO x_job_turns AS t (queue, lane, turn_at, wake_at) VALUES (NEW.queue, NEW.lane, NULL, NEW.run_at)
    ON CONFLICT (queue, lane) DO UPDATE SET wake_at = LEAST(t.wake_at, excluded.wake_at) WHERE t.turn_at IS NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER x_jobs_turn AFTER INSERT OR UPDATE OF state, run_at ON x_jobs
FOR EACH ROW WHEN (NEW.lane IS NOT NULL AND NEW.state IN ('ready', 'delayed', 'suspended'))
EXECUTE FUNCTION x_job_turn_file();
"""

# SQL_DROP_TURN_TRIGGER — 0011 reversed.
SQL_DROP_TURN_TRIGGER = """
DROP TRIGGER IF EXISTS x_jobs_turn ON x_jobs;
DROP FUNCTION IF EXISTS x_job_turn_file();
"""

# SQL_CLAIM_FAIR — SQL_CLAIM for a claim that names a fair queue (%(fair)s[i]: whether %(queues)s[i] is),
# still ONE statement whose cost is the rows and lanes it takes, never the lanes waiting:
# - active: the lanes whose turn is oldest (x_job_turns_turn_idx, LIMIT cap); waking: the lanes whose first
#   waiting row fell due, first due first (x_job_turns_wake_idx, LIMIT cap) — both FOR UPDATE SKIP LOCKED;
# - picked: the first cap of the two by turn (a waking lane's is its wake_at; it goes first on a tie);
# - lanes: each picked lane's due rows in claim order (x_jobs_lane_idx), at most its share of the cap —
#   the cap over the lanes picked, rounded up, or enough to fill the batch beside one row of each other
#   lane (cap - lanes + 1), whichever is more: handed out round by round, the lanes fill the batch. The lane
#   is named as a range of one value and ordered by first: the same rows in the same order, but an order
#   only x_jobs_lane_idx gives. Named by equality, the lane is a constant to the planner and both indexes
#   give the order; the generic plan, costed where one org held every row, chose x_jobs_claim_idx and read
#   the busy org's whole backlog to find a quiet org's one row (15 ms a claim behind 100,000 rows);
# - due / lapsed: SQL_CLAIM's two arms, per queue, fair or not: the rows that fill what the lanes leave
#   (a lone org still gets whole batches; rows filed before the queue was fair have no lane) and the
#   running rows whose lease lapsed;
# - take: per queue, the lanes' rows first (round by round: each lane's first, then each one's second),
#   then the rest in claim order, up to the cap;
# - turned: ONE update per lane row — a served lane's turn is now (unless fewer lanes wait than the cap:
#   then every one is served every claim, and the noisy org's one row is not rewritten per claim); a woken
#   lane not served keeps its wake_at as its turn (its place in time); a picked lane with no due row is
#   retired until its first waiting row's run time (x_jobs_lane_run_at_idx; NULL when none: the trigger
#   files the lane again).
SQL_CLAIM_FAIR = f"""
WITH registry AS (
    {CLAIM_RECORD_WORKER}
),
wanted AS (
    SELECT c.queue, c.cap, c.fair
    FROM unnest(%(queues)s::text[], %(caps)s::int[], %(fair)s::boolean[]) AS c(queue, cap, fair)
    WHERE NOT EXISTS (SELECT 1 FROM x_job_paused_queues p WHERE p.queue = c.queue)
),
waking AS (
    SELECT w.queue, w.cap, t.lane, t.wake_at AS turn_at, 0 AS waking
    FROM wanted w
    CROSS JOIN LATERAL (
        SELECT t.lane, t.wake_at FROM x_job_turns t
        WHERE t.queue = w.queue AND t.turn_at IS NULL AND t.wake_at <= to_timestamp(%(now)s / 1000.0)
        ORDER BY t.wake_at
        LIMIT w.cap
        FOR UPDATE SKIP LOCKED
    ) t
    WHERE w.fair
),
active AS (
    SELECT w.queue, w.cap, t.lane, t.turn_at, 1 AS waking
    FROM wanted w
    CROSS JOIN LATERAL (
        SELECT t.lane, t.turn_at FROM x_job_turns t
        WHERE t.queue = w.queue AND t.turn_at IS NOT NULL
        ORDER BY t.turn_at
        LIMIT w.cap
        FOR UPDATE SKIP LOCKED
    ) t
    WHERE w.fair
),
turns AS (
    SELECT queue, cap, lane, turn_at, waking = 0 AS woken,
           row_number() OVER (PARTITION BY queue ORDER BY turn_at, waking, lane) AS place,
           count(*) OVER (PARTITION BY queue) AS lanes
    FROM (SELECT * FROM active UNION ALL SELECT * FROM waking) t
),
picked AS (
    SELECT queue, lane, place,
           greatest(ceil(cap::numeric / count(*) OVER (PARTITION BY queue)),
                    cap - count(*) OVER (PARTITION BY queue) + 1)::int AS share
    FROM turns
    WHERE place <= cap
),
lanes AS (
    SELECT p.lane, p.place, k.*
    FROM picked p
    CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.name, j.state, j.attempts, j.max_attempts, j.priority, j.run_at
        FROM x_jobs j
        WHERE j.queue = p.queue AND j.lane >= p.lane AND j.lane <= p.lane  -- the lane: see above
          AND j.state IN ('ready', 'delayed', 'suspended') AND j.run_at <= to_timestamp(%(now)s / 1000.0)
        ORDER BY j.lane, j.priority DESC, j.run_at, j.id
        LIMIT p.share
        FOR UPDATE SKIP LOCKED
    ) k
),
{FILL_ARMS},
locked AS (
    SELECT DISTINCT ON (id) *
    FROM (
        SELECT l.id, l.queue, l.name, l.state, l.attempts, l.max_attempts, l.priority, l.run_at, 0 AS tier,
               row_number() OVER (PARTITION BY l.queue, l.lane ORDER BY l.priority DESC, l.run_at, l.id) AS round,
               l.place
        FROM lanes l
        UNION ALL
        SELECT id, queue, name, state, attempts, max_attempts, priority, run_at, 1, 0, 0 FROM due
        UNION ALL
        SELECT id, queue, name, state, attempts, max_attempts, priority, run_at, 1, 0, 0 FROM lapsed
    ) u
    ORDER BY id, tier
),
exhausted AS (
    SELECT id, name FROM locked WHERE state = 'running' AND attempts >= max_attempts
),
take AS (
    SELECT id FROM (
        SELECT l.id, w.cap,
               row_number() OVER (
                   PARTITION BY l.queue ORDER BY l.tier, l.round, l.place, l.priority DESC, l.run_at, l.id
               ) AS n
        FROM locked l JOIN wanted w ON w.queue = l.queue
        WHERE NOT (l.state = 'running' AND l.attempts >= l.max_attempts)
    ) ranked
    WHERE n <= cap
),
turned AS (
    UPDATE x_job_turns t
    SET turn_at = CASE o.outcome WHEN 'served' THEN to_timestamp(%(now)s / 1000.0)
                                 WHEN 'woken' THEN t.wake_at END,
        wake_at = CASE WHEN o.outcome = 'retired' THEN (
            SELECT min(j.run_at) FROM x_jobs j
            WHERE j.queue = o.queue AND j.lane = o.lane AND j.state IN ('ready', 'delayed', 'suspended')
        ) END
    FROM (
        SELECT tu.queue, tu.lane,
               CASE WHEN EXISTS (SELECT 1 FROM lanes l JOIN take k ON k.id = l.id
                                 WHERE l.queue = tu.queue AND l.lane = tu.lane)
                        THEN CASE WHEN tu.woken OR tu.lanes >= tu.cap THEN 'served' ELSE 'kept' END
                    WHEN tu.place <= tu.cap
                         AND NOT EXISTS (SELECT 1 FROM lanes l WHERE l.queue = tu.queue AND l.lane = tu.lane)
                        THEN 'retired'
                    WHEN tu.woken THEN 'woken'
                    ELSE 'kept' END AS outcome
        FROM turns tu
    ) o
    WHERE o.outcome <> 'kept' AND t.queue = o.queue AND t.lane = o.lane
),
{CLAIM_SETTLE}"""
