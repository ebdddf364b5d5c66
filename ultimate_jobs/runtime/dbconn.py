"""Django connections in long-lived role threads — a worker's slots, its claim loop and settle flusher,
the outbox relay's loop: one per thread, kept across passes, closed only when stale.

Django's ``close_old_connections()`` closes every connection whose ``CONN_MAX_AGE`` passed — with
the default of 0 that is every connection after every job, a new Postgres session per job. A role
thread instead keeps its connection while it is healthy and drops it when it is not: after an
error left it unusable, when a body leaked an open ``atomic()`` block, or when a positive
``CONN_MAX_AGE`` expired.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections


def release_stale_connections() -> None:
    """Close this thread's connections that must not serve the next job."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.in_atomic_block:  # a body left a transaction open: never let the next job join it
            conn.close()
            continue
        max_age = conn.settings_dict.get("CONN_MAX_AGE", 0)
        if max_age and conn.close_at is not None and time.monotonic() >= conn.close_at:
            conn.close()
            continue
        if conn.errors_occurred:
            if not conn.is_usable():
                conn.close()
            else:
                conn.errors_occurred = False


def close_thread_connections() -> None:
    """Close every connection this thread opened (a slot thread that is exiting)."""
    for conn in connections.all(initialized_only=True):
        conn.close()


@contextmanager
def closing_what_it_opens() -> Iterator[None]:
    """Close, on the way out, each connection of this thread that the block opened — for work run on a
    thread no role owns (the clock's timer thread, which lives as long as the process). A connection that
    was open before the block (a test thread's, on a frozen clock) is left as it was."""
    open_before = {conn.alias for conn in connections.all(initialized_only=True) if conn.connection is not None}
    try:
        yield
    finally:
        for conn in connections.all(initialized_only=True):
            if conn.alias not in open_before and conn.connection is not None and not conn.in_atomic_block:
                conn.close()
