"""The SQLite driver's cross-process wake: a watch on ``PRAGMA data_version``.

SQLite has no LISTEN/NOTIFY, but every connection can ask ``PRAGMA data_version``, a counter that moves
whenever ANOTHER connection — in this process or any other on the file — commits. It reads the WAL
index in shared memory: no table, no lock, no disk. A worker's subscription starts one watch thread
with its own connection to the file; every :data:`WATCH_INTERVAL_MS` it reads the counter, and only
when it moved does it run one read, :data:`SQL_WATCH_DUE` — which queues hold a due row — and tell
the subscribers those queues. A commit that made nothing due (a settle, a heartbeat, the worker's own
registry row) wakes nobody. So a row another process enqueues is claimed within about one interval;
the worker's poll stays the guarantee behind it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

from ...core.logs import log_event
from .queries.session import SQL_DATA_VERSION, SQL_WATCH_DUE

WATCH_INTERVAL_MS = 100
"""How often the watch reads ``PRAGMA data_version``: 600 reads an idle minute, none touching a table."""


class DataVersionWatch:
    """One watch thread over the database file ``path``: ``now`` answers the instant (column text) a due
    row is judged against, ``on_due`` hears each due queue. :meth:`is_live` once the first read landed."""

    def __init__(
        self,
        path: str,
        *,
        now: Callable[[], str],
        on_due: Callable[[str], None],
        interval_ms: int = WATCH_INTERVAL_MS,
    ) -> None:
        self._path = path
        self._now = now
        self._on_due = on_due
        self._interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._live = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ultimate_jobs.sqlite-watch", daemon=True)
        self._thread.start()

    def is_live(self) -> bool:
        """Whether the watch is reading the counter (a failed read drops it until one lands again)."""
        return self._live.is_set() and self._thread.is_alive()

    def stop(self) -> None:
        """Stop the thread and close its connection. Idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        last: int | None = None
        reported = False  # the current loss is logged once, not every interval
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = sqlite3.connect(self._path, timeout=5.0, uri=self._path.startswith("file:"))
                (version,) = conn.execute(SQL_DATA_VERSION).fetchone()
                self._live.set()
                reported = False
                if last is not None and version != last:
                    for (queue,) in conn.execute(SQL_WATCH_DUE, {"now": self._now()}).fetchall():
                        self._on_due(queue)
                last = version
            except sqlite3.Error as exc:  # the file is away or locked past the timeout: try again next time
                if not reported:
                    log_event(logging.WARNING, "jobs.wake.lost", error=repr(exc), path=self._path)
                    reported = True
                self._live.clear()
                if conn is not None:
                    conn.close()
                conn, last = None, None
            self._stop.wait(self._interval_s)
        self._live.clear()
        if conn is not None:
            conn.close()
