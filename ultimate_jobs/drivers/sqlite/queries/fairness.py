"""Fair queues on SQLite: the trigger that files a lane in ``x_job_turns`` (see the Postgres catalogue's
``fairness`` module for the rotation) and the statements of the fair claim, which runs inside the claim's
``BEGIN IMMEDIATE`` transaction. SQLite has one writer at a time, so no claim can retire a lane while an
enqueue of it is in flight: the trigger needs no lock of its own."""

from __future__ import annotations

# SQL_CREATE_TURN_TRIGGER — file a lane whenever a row of a fair queue becomes waiting (0011): a new or
# waiting lane wakes at that row's run time if sooner; an active lane (turn_at set) is left as it is.
_FILE_LANE = """
    INSERT INTO x_job_turns (queue, lane, turn_at, wake_at) VALUES (NEW.queue, NEW.lane, NULL, NEW.run_at)
    ON CONFLICT (queue, lane) DO UPDATE SET wake_at = min(coalesce(wake_at, excluded.wake_at), excluded.wake_at)
    WHERE turn_at IS NULL;"""
SQL_CREATE_TURN_TRIGGER = f"""
CREATE TRIGGER x_jobs_turn_insert AFTER INSERT ON x_jobs
WHEN NEW.lane IS NOT NULL AND NEW.state IN ('ready', 'delayed', 'suspended')
BEGIN{_FILE_LANE}
END;

CREATE TRIGGER x_jobs_turn_update AFTER UPDATE OF state, run_at ON x_jobs
WHEN NEW.lane IS NOT NULL AND NEW.state IN ('ready', 'delayed', 'suspended')
BEGIN{_FILE_LANE}
END;
"""

# SQL_DROP_TURN_TRIGGER — 0011 reversed.
SQL_DROP_TURN_TRIGGER = """
DROP TRIGGER IF EXISTS x_jobs_turn_insert;

DROP TRIGGER IF EXISTS x_jobs_turn_update;
"""

# SQL_TURNS_NEXT — the :cap active lanes of :queue whose turn is oldest, with it (x_job_turns_turn_idx).
SQL_TURNS_NEXT = """
SELECT lane, turn_at FROM x_job_turns WHERE queue = :queue AND turn_at IS NOT NULL ORDER BY turn_at LIMIT :cap"""

# SQL_TURNS_WAKING — the :cap waiting lanes of :queue whose first row fell due by :now, first due first,
# with that run time (x_job_turns_wake_idx).
SQL_TURNS_WAKING = """
SELECT lane, wake_at FROM x_job_turns
WHERE queue = :queue AND turn_at IS NULL AND wake_at <= :now
ORDER BY wake_at, lane
LIMIT :cap"""

# SQL_LANE_DUE — one lane's due rows in claim order, at most :share (x_jobs_lane_idx), with
# SQL_CLAIM_DUE's columns. The index is named: where no ANALYZE has run (SQLite's default), the planner took
# x_jobs_lane_run_at_idx and sorted every due row of the lane for each claim (17 ms behind 100,000 rows).
SQL_LANE_DUE = """
SELECT j.id, j.name, j.state, j.attempts, j.max_attempts, j.priority, j.run_at
FROM x_jobs j INDEXED BY x_jobs_lane_idx
WHERE j.queue = :queue AND j.lane = :lane AND j.state IN ('ready', 'delayed', 'suspended') AND j.run_at <= :now
ORDER BY j.priority DESC, j.run_at, j.id
LIMIT :share"""

# SQL_TURNS_SERVED — the lanes :lanes (a JSON array) took their turn at :now.
SQL_TURNS_SERVED = """
UPDATE x_job_turns SET turn_at = :now, wake_at = NULL
WHERE queue = :queue AND lane IN (SELECT value FROM json_each(:lanes))"""

# SQL_TURNS_WOKEN — the waiting lanes :lanes (a JSON array) join the rotation at their wake time.
SQL_TURNS_WOKEN = """
UPDATE x_job_turns SET turn_at = wake_at, wake_at = NULL
WHERE queue = :queue AND lane IN (SELECT value FROM json_each(:lanes)) AND turn_at IS NULL"""

# SQL_TURNS_RETIRE — take the lanes :lanes (a JSON array) out of the rotation until their first waiting
# row's run time (x_jobs_lane_run_at_idx; NULL when they have none: the trigger files them again).
SQL_TURNS_RETIRE = """
UPDATE x_job_turns
SET turn_at = NULL,
    wake_at = (SELECT min(j.run_at) FROM x_jobs j
               WHERE j.queue = x_job_turns.queue AND j.lane = x_job_turns.lane
                 AND j.state IN ('ready', 'delayed', 'suspended'))
WHERE queue = :queue AND lane IN (SELECT value FROM json_each(:lanes))"""
