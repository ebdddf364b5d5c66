"""SQL text both dialects' catalogues compose verbatim (each statement still lives, whole, in its dialect's
catalogue; this is only the part the two write alike)."""

from __future__ import annotations

# The takeover rule of the leader lease upsert (x_job_scheduler_leases, primary key): the row is taken
# when it is already this holder's or expired; a live lease of another holder is left alone (the upsert
# answers no row). A renewal of a live lease keeps its acquired_at; a new term starts it at the new one.
LEASE_TAKEOVER = """ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    acquired_at = CASE WHEN l.holder = excluded.holder AND l.expires_at > excluded.acquired_at
                       THEN l.acquired_at ELSE excluded.acquired_at END,
    expires_at = excluded.expires_at
WHERE l.holder = excluded.holder OR l.expires_at <= excluded.acquired_at"""
