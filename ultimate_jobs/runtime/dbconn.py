"""Django connections in long-lived role threads — a worker's slots, its claim loop and settle flusher,
the outbox relay's loop: one per thread, kept across passes, closed only when stale.

Django's ``close_old_connections()`` closes every connection whose ``CONN_MAX_AGE`` passed — with
the default of 0 that is every connection after every job, a new Postgres session per job. A role
thread instead keeps its connection while it is healthy and drops it when it is not: after an
error left it unusable, when a body leaked an open ``atomic()`` block, or when a positive
``CONN_MAX_AGE`` expired.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

_opened = threading.local()
"""``wrappers``: the connection wrappers this thread opened a connection on (a list), from its first
:func:`release_stale_connections` on — read after every job in its place of ``connections.all()``, which
walks every alias through Django's thread-critical local (3 µs a job; a weak set's iteration costs 2 µs,
this list's 0.05). It holds what the thread's ``connections`` holds already; a wrapper Django replaced
(new ``DATABASES`` in a test) stays on it closed, and is skipped."""


def _on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **_: Any) -> None:
    wrappers = getattr(_opened, "wrappers", None)
    if wrappers is not None and connection not in wrappers:  # the first check takes the earlier ones
        wrappers.append(connection)


connection_created.connect(_on_connection_created, dispatch_uid="ultimate_jobs.runtime.dbconn")


def _thread_connections() -> list[BaseDatabaseWrapper]:
    """Every connection wrapper this thread opened a connection on: the ones it had at its first check, and
    each that connected since (Django's ``connection_created``, sent on the thread that connects)."""
    wrappers: list[BaseDatabaseWrapper] | None = getattr(_opened, "wrappers", None)
    if wrappers is None:
        wrappers = _opened.wrappers = list(connections.all(initialized_only=True))
    return wrappers


def release_stale_connections() -> None:
    """Close this thread's connections that must not serve the next job."""
    for conn in _thread_connections():
        if conn.connection is None:
            continue
        if conn.in_atomic_block:  # a body left a transaction open: never let the next job join it
            _discard_leaked_transaction(conn)
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


def _discard_leaked_transaction(conn: BaseDatabaseWrapper) -> None:
    """Close a connection a body left inside ``atomic()`` — its writes roll back, its ``on_commit``
    callbacks never run — and forget the block, so this thread's next query dials a fresh session.
    Django's ``close()`` alone keeps the wrapper inside the block, where every later query fails with
    "the connection is closed": one leaked block would fail every later job of the slot."""
    conn.close()
    conn.in_atomic_block = False  # what Django's connect() resets, which it runs only with no connection
    conn.closed_in_transaction = False
    conn.needs_rollback = False
    conn.savepoint_ids = []
    conn.atomic_blocks = []
    conn.connection = None


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
