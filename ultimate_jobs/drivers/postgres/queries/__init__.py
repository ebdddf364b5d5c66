"""The Postgres dialect's statement catalogue: every statement the Postgres backend runs, one ``SQL_*``
constant each with a comment of what it does and which index it uses, a module per entity.

- :mod:`.jobs` — enqueue, claim, settles, stats, purge, fleet leases, the wake probe (the hot path);
- :mod:`.introspect` — the operator surface (``driver.introspect``);
- :mod:`.scheduler` — the leader lease, watermarks and the fire; :mod:`.backfills` — the backfill ledger;
- :mod:`.outbox` — ``x_outbox``; :mod:`.events` — ``x_job_events``.
"""
