"""The SQLite dialect's statement catalogue: every statement the SQLite backend runs, one ``SQL_*`` constant
each with a comment of what it does and which index it uses, a module per entity.

- :mod:`.jobs` — enqueue, claim, settles, progress, the worker registry, stats, purge, fleet leases (the
  hot path: the driver's own statements);
- :mod:`.operator` — the operator's reads and actions (``driver.operator``);
- :mod:`.stores` — the scheduler's leader lease, the counter rollup it owes, watermarks and fires, and the
  backfill ledger;
- :mod:`.outbox` — ``x_outbox``; :mod:`.events` — ``x_job_events``;
- :mod:`.session` — the journal mode, transaction bounds and the cross-process watch.
"""
