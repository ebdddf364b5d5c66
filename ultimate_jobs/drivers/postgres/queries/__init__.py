"""The Postgres dialect's statement catalogue: every statement the Postgres backend runs, one ``SQL_*``
constant each with a comment of what it does and which index it uses, a module per entity.

- :mod:`.jobs` — enqueue, claim, settles, progress, the worker registry, stats, purge, fleet leases, the wake
  probe (the hot path: the driver's own statements);
- :mod:`.operator` — the operator's reads and actions (``driver.operator``);
- :mod:`.scheduler` — the leader lease, watermarks, the fire and the counter rollup the leader owes;
- :mod:`.backfills` — the backfill ledger;
- :mod:`.outbox` — ``x_outbox``; :mod:`.events` — ``x_job_events``.
"""
