"""The Redis driver's wake: one blocking ``XREAD`` per worker process on the store's wake stream.

Every enqueue, due retry, requeue, promote and resume that makes a row due appends the queue name to
``{prefix}:wake`` (capped near 1,000 entries) in the script that made it due. The reader blocks on
the stream with no timeout, so an idle process spends no command on it and hears a new row at once.
TCP keepalive probes (:data:`KEEPALIVE`) find a server that vanished without closing the connection
within about a minute; a lost connection drops the wake (the worker's poll still guarantees pickup,
its idle ceiling back at 2 s), and the reader re-dials with backoff and reads from the newest entry.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import redis

from ...core.logs import log_event

if TYPE_CHECKING:
    from .driver import RedisDriver

KEEPALIVE = {socket.TCP_KEEPIDLE: 30, socket.TCP_KEEPINTVL: 10, socket.TCP_KEEPCNT: 3}
"""The wake connection's keepalive: probe after 30 s idle, every 10 s, give up after 3 unanswered."""
WAKE_BACKOFF_MAX_S = 5.0


class RedisWake:
    """The reader thread: announces each queue named on the wake stream to ``on_wake``."""

    def __init__(self, driver: RedisDriver, on_wake: Callable[[str], None]) -> None:
        self._d = driver
        self._on_wake = on_wake
        kwargs: dict[str, Any] = dict(driver.client.connection_pool.connection_kwargs)
        kwargs["socket_timeout"] = None  # the read blocks until an entry arrives or the connection dies
        kwargs["socket_keepalive"] = True
        kwargs["socket_keepalive_options"] = KEEPALIVE
        kwargs["health_check_interval"] = 0  # no PING before each read: the keepalive is the check
        self._client = redis.Redis(
            connection_pool=redis.ConnectionPool(
                connection_class=driver.client.connection_pool.connection_class, max_connections=2, **kwargs
            )
        )
        self._stream = driver.key("wake")
        self._stop_stream = driver.key("wake", "stop", uuid.uuid4().hex)
        self._stopped = threading.Event()
        self._live = False
        self._thread = threading.Thread(target=self._run, name="jobs-redis-wake", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_live(self) -> bool:
        return self._live and not self._stopped.is_set()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the reader: a private stream entry ends its blocking read at once."""
        self._stopped.set()
        with contextlib.suppress(redis.RedisError):  # a reader on a server that is gone is not blocked
            self._client.xadd(self._stop_stream, {"stop": "1"})
        self._thread.join(timeout)
        with contextlib.suppress(redis.RedisError):
            self._client.delete(self._stop_stream)
            self._client.close()
        return not self._thread.is_alive()

    def _run(self) -> None:
        last = "$"
        backoff = 0.05
        while not self._stopped.is_set():
            try:
                if not self._live:
                    self._client.ping()
                    self._live = True
                    backoff = 0.05
                    log_event(logging.INFO, "jobs.wake.live", driver="redis")
                got = self._client.xread({self._stream: last, self._stop_stream: "$"}, block=0, count=500)
            except redis.RedisError as exc:
                if self._stopped.is_set():
                    return
                if self._live:
                    log_event(logging.WARNING, "jobs.wake.lost", driver="redis", error=repr(exc))
                self._live = False
                last = "$"  # a restarted server may number its entries from zero again
                time.sleep(backoff)
                backoff = min(backoff * 2, WAKE_BACKOFF_MAX_S)
                continue
            queues: set[str] = set()
            for stream, entries in cast(list[Any], got or []):
                name = stream.decode() if isinstance(stream, bytes) else stream
                if name != self._stream:
                    continue
                for entry_id, fields in entries:
                    last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                    queue = fields.get("q", fields.get(b"q"))
                    if queue is not None:
                        queues.add(queue.decode() if isinstance(queue, bytes) else queue)
            for queue in sorted(queues):
                try:
                    self._on_wake(queue)
                except Exception as exc:  # a listener's failure must not end the wake
                    log_event(logging.ERROR, "jobs.wake.listener-failed", driver="redis", error=repr(exc))
