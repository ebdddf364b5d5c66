"""Every statement of the SQLite event bus, verbatim, one constant each.

The bus's one clock on SQLite is the host's (every process on one SQLite file shares one host): the bus
computes each stamp and expiry instant itself and passes it as column text (``YYYY-MM-DD HH:MM:SS.ffffff``,
UTC, fixed width so text order is time order).
"""

from __future__ import annotations

# SQL_EVENT_PUBLISH — store one event stamped :published, matchable until :expires. Runs on the
# caller's connection: inside transaction.atomic() the event commits (and becomes visible to waits) with
# the caller's rows.
SQL_EVENT_PUBLISH = """
INSERT INTO x_job_events (id, event, data, published_at, expires_at) VALUES (:id, :event, :data, :published, :expires)
"""

# SQL_EVENT_CANDIDATES — the unexpired :event rows published at or after :since, oldest first, a
# page of :limit after (:after_at, :after_id) (x_job_events_event_idx). The bus applies the containment
# match to each in order and answers the first that matches.
SQL_EVENT_CANDIDATES = """
SELECT id, event, data, published_at, expires_at
FROM x_job_events
WHERE event = :event AND published_at >= :since AND expires_at > :now
  AND (published_at, id) > (:after_at, :after_id)
ORDER BY published_at, id
LIMIT :limit
"""

# SQL_EVENT_PURGE — delete at most :limit expired events, oldest expiry first, in ONE short
# statement (x_job_events_expires_idx). Answers the ids that went.
SQL_EVENT_PURGE = """
DELETE FROM x_job_events
WHERE id IN (SELECT id FROM x_job_events WHERE expires_at <= :now ORDER BY expires_at LIMIT :limit)
RETURNING id
"""
