"""Every statement of the Postgres event bus, verbatim, one constant each.

The event bus has ONE clock, and on Postgres it is the database's: every stamp and every expiry
comparison reads ``clock_timestamp()`` — the server's wall clock at the statement (``now()`` would
freeze at the start of an enclosing transaction). No statement takes the caller's clock. Instants
are answered as epoch ms rounded DOWN, so a wait stamped with ``SQL_EVENT_NOW`` never starts after
an event its statement could already see.
"""

from __future__ import annotations

# SQL_EVENT_NOW — the bus clock: the database's current instant, epoch ms (floored).
SQL_EVENT_NOW = "SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint"

# SQL_EVENT_PUBLISH — store one event stamped with the database clock, matchable until now + %(ttl)s
# ms. Runs on the caller's connection: inside transaction.atomic() the event commits (and becomes
# visible to waits) with the caller's rows. Answers (id, published ms, expires ms).
SQL_EVENT_PUBLISH = """
WITH at AS (SELECT clock_timestamp() AS now)
INSERT INTO x_job_events (id, event, data, published_at, expires_at)
SELECT gen_random_uuid(), %(event)s, %(data)s::jsonb, at.now, at.now + %(ttl)s * interval '1 millisecond'
FROM at
RETURNING id, floor(extract(epoch from published_at) * 1000)::bigint,
          floor(extract(epoch from expires_at) * 1000)::bigint
"""

# SQL_EVENT_FIND — the oldest unexpired %(event)s published at or after %(since)s whose data contains
# %(match)s (jsonb containment: every key of the match, nested objects recursively)
# (x_job_events_event_idx: one event name, published_at onwards, in order). Answers at most one row.
SQL_EVENT_FIND = """
SELECT id, event, data, floor(extract(epoch from published_at) * 1000)::bigint,
       floor(extract(epoch from expires_at) * 1000)::bigint
FROM x_job_events
WHERE event = %(event)s
  AND published_at >= to_timestamp(%(since)s / 1000.0)
  AND expires_at > clock_timestamp()
  AND data @> %(match)s::jsonb
ORDER BY published_at, id
LIMIT 1
"""

# SQL_EVENT_PURGE — delete at most %(limit)s expired events, oldest expiry first, in ONE short statement
# (x_job_events_expires_idx). Answers how many; the bus runs it again while a batch comes back full, so
# a purge of millions of events never holds one long transaction.
SQL_EVENT_PURGE = """
WITH picked AS (
    SELECT id FROM x_job_events WHERE expires_at <= clock_timestamp() ORDER BY expires_at LIMIT %(limit)s
),
gone AS (
    DELETE FROM x_job_events e USING picked p WHERE e.id = p.id RETURNING 1
)
SELECT count(*) FROM gone
"""
