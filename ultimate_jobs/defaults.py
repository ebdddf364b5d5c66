"""The defaults more than one module relies on, each written once.

This module imports nothing, so a driver can read a default without importing Django's settings.
``conf.py`` builds the defaults of ``settings.ULTIMATE_JOBS`` from these names; the drivers, the roles
and ``job_worker()`` take theirs from here too, so a default changed here changes everywhere.
"""

from __future__ import annotations

DEFAULT_VISIBILITY_TIMEOUT_MS = 30_000
"""How long a claim stays invisible without a heartbeat (``ULTIMATE_JOBS['VISIBILITY_TIMEOUT']``): the
lease window a driver claims and renews with, and how long ``driver.operator.workers()`` keeps a worker's
registry row after its last beat."""

DEFAULT_DRAIN_DEADLINE_MS = 25_000
"""How long a role's close phase waits for work in flight (``ULTIMATE_JOBS['DRAIN_DEADLINE']``): the
worker, the scheduler and the relay share it."""

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
"""The server the Redis driver connects to when ``ULTIMATE_JOBS['REDIS_URL']`` is unset."""

PURGE_BATCH = 1_000
"""The most rows one retention delete removes (``purge_finished``, the outbox's ``purge_published``, the
event bus's purge; ``ULTIMATE_JOBS['RETENTION']['BATCH']``): a purge of millions of rows is thousands of
short statements, never one long transaction."""

DEFAULT_EVENT_POLL_MS = 30_000
"""How often a ``step.wait_for_event`` parked job looks for its event when no ``event_poll=`` is declared."""

MAX_ASYNC_CONCURRENCY = 10_000
"""The most async jobs one worker process runs at once on a queue (``ULTIMATE_JOBS['ASYNC_CONCURRENCY']``,
``--async-concurrency``): an async run is a task on one event loop, not a thread, but each still holds a
claimed row, a lease and its memory."""

DEFAULT_ASYNC_CONCURRENCY = 100
"""How many async jobs a worker runs at once on a queue that has an async job declared, unless told."""
