"""The SQLite dialect's statement catalogue: every statement the SQLite backend runs, one ``SQL_*`` constant
each with a comment of what it does and which index it uses, a module per entity.

- :mod:`.jobs` — enqueue, claim, settles, stats, purge, fleet leases (the hot path);
- :mod:`.introspect` — the operator surface (``driver.introspect``);
- :mod:`.stores` — the scheduler's leader lease, watermarks and fires, and the backfill ledger;
- :mod:`.outbox` — ``x_outbox``; :mod:`.events` — ``x_job_events``;
- :mod:`.session` — the journal mode, transaction bounds and the cross-process watch.
"""
