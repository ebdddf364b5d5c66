"""The Redis backend's script catalogue: every Lua script the Redis driver runs, one constant each, a
module per entity — as the SQL backends keep their statements in ``queries/``.

- :mod:`.prelude` — the key builders, state moves and helpers prepended to every script;
- :mod:`.jobs` — enqueue, claim, settles, heartbeat, progress, stats, purge, fleet slots (the hot path: the
  driver's own scripts);
- :mod:`.operator` — the operator's actions (``driver.operator``);
- :mod:`.listing` — the job list and count in each order;
- :mod:`.rates` — the rate schedules (``driver.rates``): the take, the state and forgetting;
- :mod:`.scheduler` — the leader lease, the counter rollup, watermarks and the fire;
- :mod:`.backfills` — the backfill ledger.

:data:`SCRIPTS` maps the name :meth:`RedisDriver.run` takes to the full source it registers.
"""

from __future__ import annotations

from . import backfills, jobs, listing, operator, rates, scheduler
from .prelude import HELPERS, PRELUDE

_BODIES: dict[str, str] = {
    "enqueue": jobs.ENQUEUE,
    "claim": jobs.CLAIM,
    "ack": jobs.ACK,
    "nack": jobs.NACK,
    "heartbeat": jobs.HEARTBEAT,
    "save_step": jobs.SAVE_STEP,
    "record_progress": jobs.RECORD_PROGRESS,
    "stats": jobs.STATS,
    "purge": jobs.PURGE,
    "lease": jobs.LEASE,
    "rate_take": rates.RATE_TAKE,
    "rate_state": rates.RATE_STATE,
    "rate_forget": rates.RATE_FORGET,
    "list": listing.LIST,
    "count": listing.COUNT,
    "remove": operator.REMOVE,
    "requeue": operator.REQUEUE,
    "cancel": operator.CANCEL,
    "promote": operator.PROMOTE,
    "requeue_many": operator.REQUEUE_MANY,
    "remove_many": operator.REMOVE_MANY,
    "promote_many": operator.PROMOTE_MANY,
    "resume_queue": operator.RESUME_QUEUE,
    "leader_acquire": scheduler.LEADER_ACQUIRE,
    "leader_release": scheduler.LEADER_RELEASE,
    "rollup": scheduler.ROLLUP,
    "sample_queues": scheduler.SAMPLE_QUEUES,
    "scheduler_load": scheduler.SCHEDULER_LOAD,
    "scheduler_fire": scheduler.SCHEDULER_FIRE,
    "backfill_begin": backfills.BACKFILL_BEGIN,
    "backfill_progress": backfills.BACKFILL_PROGRESS,
    "backfill_finish": backfills.BACKFILL_FINISH,
}

SCRIPTS: dict[str, str] = {name: PRELUDE + HELPERS + body for name, body in _BODIES.items()}
"""Every script by the name the driver runs it under, prelude and helpers included."""

__all__ = ["SCRIPTS"]
