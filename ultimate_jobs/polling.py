"""The idle-poll rule every polling loop shares — the worker's claim loop, the outbox relay, the wake.

The spec's "Idle cost and pickup latency": an idle loop doubles its wait up to a ceiling. Undeclared,
the ceiling is :data:`WOKEN_IDLE_POLL_CEILING_MS` (5 s) while a wake (a LISTEN session) is proven to
deliver, and :data:`IDLE_POLL_CEILING_MS` (2 s) otherwise; the poll is the guarantee, the wake is
latency. A neutral module: the roles and the drivers both read it, and it imports neither.
"""

from __future__ import annotations

IDLE_POLL_CEILING_MS = 2_000
"""The idle ceiling while no wake is proven."""

WOKEN_IDLE_POLL_CEILING_MS = 5_000
"""The idle ceiling while a wake is proven to deliver."""


def idle_ceiling_for(declared: int | None, *, wake_live: bool) -> int:
    """The idle ceiling: ``declared`` (``idle_poll_max``) when given, else 5 s while the wake is proven
    and 2 s otherwise.

    >>> idle_ceiling_for(None, wake_live=True)
    5000
    """
    if declared:
        return declared
    return WOKEN_IDLE_POLL_CEILING_MS if wake_live else IDLE_POLL_CEILING_MS
