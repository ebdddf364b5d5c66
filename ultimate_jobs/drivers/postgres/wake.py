"""The wake: ONE ``LISTEN x_jobs_wake`` session per worker process that turns "another process
committed" into a pass of the claim loop — and is PROVEN before the idle ceiling rises.

:class:`QueueWake` holds one dedicated psycopg connection (autocommit) and reads its notifications on a
daemon thread; each payload is a queue name, handed to ``on_wake(queue)``. Right after ``LISTEN`` it sends
a probe through the POOL (``probe(payload)``, a ``pg_notify`` on Django's connection, see
:func:`pool_probe`); only when that payload comes back on the session is the wake live
(``jobs.wake.live``) and the idle ceiling allowed to rise to 5 s. A probe that never comes back is
``jobs.wake.unverified``, once, with the fix: a transaction-pooling proxy delivers no notifications.

The poll is the guarantee: a notification is lost with the session that would have carried it. A lost
session is ``jobs.wake.lost``; the wake re-dials with a bounded back-off and proves itself again, and
meanwhile jobs start on the 2 s poll.

One lifecycle: :meth:`QueueWake.start`, :meth:`QueueWake.stop`, and :meth:`QueueWake.run_once` — one
step (dial and probe, or one read) — which tests drive directly.

>>> wake = start_queue_wake(conninfo=conninfo_for(connections["default"].settings_dict),
...                         probe=pool_probe("default"), on_wake=worker_kick)
>>> wake.idle_ceiling_ms(None)     # 2000 until proven, 5000 while live
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ...core.clock import Clock, system_clock
from ...core.logs import log_event
from ...errors import InvariantError
from ...runtime.polling import idle_ceiling_for
from .queries.jobs import SQL_WAKE_PROBE, WAKE_CHANNEL

PROBE_PREFIX = "__probe__:"  # a payload no queue name carries; never handed to on_wake
WAKE_PROOF_TIMEOUT_MS = 5_000
WAKE_REDIAL_MIN_MS = 500
WAKE_REDIAL_MAX_MS = 10_000
WAKE_READ_TIMEOUT_MS = 500  # how often the reading thread looks up (stop, the proof deadline); no statement
WAKE_STOP_TIMEOUT_S = 5.0

UNVERIFIED_FIX = (
    "give the worker role a direct or session-pooled DATABASE_URL; a transaction-pooling proxy "
    "(PgBouncer pool_mode=transaction) delivers no notifications"
)

# Dead-peer detection for the one long-lived socket; a conninfo that sets these keeps its own.
_SESSION_DEFAULTS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "application_name": "ultimate_jobs.wake",
}

# settings_dict["OPTIONS"] keys that Django consumes itself and libpq does not know.
_DJANGO_ONLY_OPTIONS = frozenset(
    {"assume_role", "isolation_level", "pool", "server_side_binding", "prepare_threshold", "cursor_factory", "context"}
)

Probe = Callable[[str], None]
WakeListener = Callable[[str], None]


class QueueWake:
    """One LISTEN session, proven by a probe through the pool. Build and start it with :func:`start_queue_wake`."""

    def __init__(
        self,
        *,
        conninfo: str,
        probe: Probe,
        on_wake: WakeListener,
        clock: Clock | None = None,
        channel: str = WAKE_CHANNEL,
        proof_timeout_ms: int = WAKE_PROOF_TIMEOUT_MS,
        redial_min_ms: int = WAKE_REDIAL_MIN_MS,
        redial_max_ms: int = WAKE_REDIAL_MAX_MS,
        read_timeout_ms: int = WAKE_READ_TIMEOUT_MS,
    ) -> None:
        if not channel:
            raise InvariantError("QueueWake(channel=...) must name a channel", {})
        if proof_timeout_ms <= 0 or read_timeout_ms <= 0 or not 0 < redial_min_ms <= redial_max_ms:
            raise InvariantError(
                "QueueWake: proof_timeout_ms and read_timeout_ms must be positive and "
                f"0 < redial_min_ms ({redial_min_ms}) <= redial_max_ms ({redial_max_ms})",
                {},
            )
        self.channel = channel
        self.clock: Clock = clock or system_clock()
        self.proof_timeout_ms = proof_timeout_ms
        self.redial_min_ms = redial_min_ms
        self.redial_max_ms = redial_max_ms
        self.read_timeout_ms = read_timeout_ms
        self.session_pid: int | None = None  # the listening backend's pid while a session is open
        self.dials = 0  # sessions opened (LISTEN landed) since construction
        self._conninfo = _session_conninfo(conninfo)
        self._probe = probe
        self._on_wake = on_wake
        self._conn: psycopg.Connection[Any] | None = None
        self._live = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._probe_payload: str | None = None
        self._probed_at_ms = 0
        self._unverified_logged = False
        self._backoff_ms = redial_min_ms
        self._failures = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the reading thread: it dials, listens, probes, then hands every payload to ``on_wake``."""
        if self._stopping.is_set():
            raise InvariantError("this QueueWake was stopped; build a new one to start again", {})
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"jobs-wake-{self.channel}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = WAKE_STOP_TIMEOUT_S) -> bool:
        """Close the session and join the thread within ``timeout`` seconds; answers whether it joined.
        Idempotent. A wake once stopped stays stopped."""
        self._stopping.set()
        self._live.clear()
        thread = self._thread
        joined = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            joined = not thread.is_alive()
        if joined:
            self._drop_session()  # the thread is gone (or never ran): nobody else touches the session
            log_event(logging.INFO, "jobs.wake.stopped", channel=self.channel)
        else:
            log_event(logging.WARNING, "jobs.wake.stop-timeout", channel=self.channel, timeout_s=timeout)
        return joined

    def is_live(self) -> bool:
        """True while the session is open AND proven: a probe sent through the pool came back on it."""
        return self._live.is_set()

    def idle_ceiling_ms(self, declared: int | None) -> int:
        """The claim loop's idle ceiling: ``declared`` when given, else 5 s while live and 2 s otherwise."""
        return idle_ceiling_for(declared, wake_live=self.is_live())

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    delay = self.run_once()
                except Exception as exc:  # never let the reading thread die: drop the session, re-dial
                    log_event(logging.ERROR, "jobs.wake.failed", channel=self.channel, error=repr(exc))
                    self._live.clear()
                    self._drop_session()
                    delay = self._next_backoff_s()
                if delay > 0:
                    self._stopping.wait(delay)
        finally:
            self._live.clear()
            self._drop_session()

    # -- one step ------------------------------------------------------------------------------

    def run_once(self) -> float:
        """One step: with no session, dial, ``LISTEN`` and send the probe; with one, read notifications
        for up to ``read_timeout_ms``. Answers how many seconds to wait before the next step (the
        re-dial back-off after a failure, else 0)."""
        if self._stopping.is_set():
            return 0.0
        if self._conn is None:
            return self._dial()
        return self._read(self._conn)

    def _dial(self) -> float:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True)
        except (psycopg.Error, OSError) as exc:
            return self._retry_later("jobs.wake.dial-failed", exc)
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except (psycopg.Error, OSError) as exc:
            _close_quietly(conn)
            return self._retry_later("jobs.wake.dial-failed", exc)
        self._conn = conn
        self.session_pid = conn.info.backend_pid
        self.dials += 1
        payload = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        self._probe_payload = payload
        self._probed_at_ms = self.clock.now_ms()
        try:
            self._probe(payload)
        except Exception as exc:  # the pool is down or refused: no proof is possible; start over later
            self._drop_session()
            return self._retry_later("jobs.wake.probe-failed", exc)
        log_event(logging.DEBUG, "jobs.wake.listening", channel=self.channel, session_pid=self.session_pid)
        return 0.0

    def _read(self, conn: psycopg.Connection[Any]) -> float:
        timeout_ms = self.read_timeout_ms
        if self._awaiting_proof():
            remaining = self._probed_at_ms + self.proof_timeout_ms - self.clock.now_ms()
            timeout_ms = max(1, min(timeout_ms, remaining))
        try:
            for note in conn.notifies(timeout=timeout_ms / 1000):
                if note.channel == self.channel:
                    self._deliver(note.payload)
        except (psycopg.Error, OSError) as exc:
            return self._lost(exc)
        if self._awaiting_proof() and self.clock.now_ms() - self._probed_at_ms >= self.proof_timeout_ms:
            self._unverified_logged = True
            log_event(
                logging.WARNING,
                "jobs.wake.unverified",
                channel=self.channel,
                session_pid=self.session_pid,
                waited_ms=self.proof_timeout_ms,
                fix=UNVERIFIED_FIX,
            )
        return 0.0

    def _awaiting_proof(self) -> bool:
        # stop() clears the live flag: a wake that is stopping awaits nothing (no false "unverified")
        return (
            not self._stopping.is_set()
            and not self._live.is_set()
            and not self._unverified_logged
            and self._probe_payload is not None
        )

    def _deliver(self, payload: str) -> None:
        if payload.startswith(PROBE_PREFIX):  # ours or another worker's: a proof, never a queue
            if payload == self._probe_payload and not self._live.is_set():
                self._live.set()
                self._backoff_ms = self.redial_min_ms
                self._failures = 0
                log_event(
                    logging.INFO,
                    "jobs.wake.live",
                    channel=self.channel,
                    session_pid=self.session_pid,
                    proved_in_ms=self.clock.now_ms() - self._probed_at_ms,
                )
            return
        try:
            self._on_wake(payload)
        except Exception as exc:  # a listener's fault must not cost the session
            log_event(logging.ERROR, "jobs.wake.listener-failed", channel=self.channel, queue=payload, error=repr(exc))

    # -- failure and re-dial -------------------------------------------------------------------

    def _lost(self, exc: BaseException) -> float:
        was_live = self._live.is_set()
        self._live.clear()
        pid = self.session_pid
        self._drop_session()
        delay = self._next_backoff_s()
        log_event(
            logging.WARNING,
            "jobs.wake.lost",
            channel=self.channel,
            session_pid=pid,
            was_live=was_live,
            error=repr(exc),
            retry_in_ms=round(delay * 1000),
        )
        return delay

    def _retry_later(self, event: str, exc: BaseException) -> float:
        self._live.clear()
        delay = self._next_backoff_s()
        log_event(
            logging.WARNING,
            event,
            channel=self.channel,
            error=repr(exc),
            attempt=self._failures,
            retry_in_ms=round(delay * 1000),
        )
        return delay

    def _next_backoff_s(self) -> float:
        """The wait before the next dial: ``redial_min_ms`` doubling to ``redial_max_ms``; reset by a proof."""
        delay = self._backoff_ms
        self._backoff_ms = min(self._backoff_ms * 2, self.redial_max_ms)
        self._failures += 1
        return delay / 1000

    def _drop_session(self) -> None:
        conn, self._conn = self._conn, None
        self.session_pid = None
        self._probe_payload = None
        if conn is not None:
            _close_quietly(conn)


def start_queue_wake(
    *,
    conninfo: str,
    probe: Probe,
    on_wake: WakeListener,
    clock: Clock | None = None,
    channel: str = WAKE_CHANNEL,
    proof_timeout_ms: int = WAKE_PROOF_TIMEOUT_MS,
    redial_min_ms: int = WAKE_REDIAL_MIN_MS,
    redial_max_ms: int = WAKE_REDIAL_MAX_MS,
    read_timeout_ms: int = WAKE_READ_TIMEOUT_MS,
) -> QueueWake:
    """Build a :class:`QueueWake` and start its thread. ``conninfo`` must reach the server directly or
    through a session-pooling proxy; ``probe(payload)`` must ``pg_notify`` ``channel`` through the pool
    (:func:`pool_probe`).

    >>> wake = start_queue_wake(conninfo=conninfo, probe=pool_probe("default"), on_wake=worker.kick_queue)
    >>> wake.stop()
    """
    wake = QueueWake(
        conninfo=conninfo,
        probe=probe,
        on_wake=on_wake,
        clock=clock,
        channel=channel,
        proof_timeout_ms=proof_timeout_ms,
        redial_min_ms=redial_min_ms,
        redial_max_ms=redial_max_ms,
        read_timeout_ms=read_timeout_ms,
    )
    wake.start()
    return wake


def pool_probe(alias: str = "default") -> Probe:
    """A probe that runs ``SQL_WAKE_PROBE`` (``pg_notify('x_jobs_wake', payload)``) on
    ``connections[alias]`` — the pool the app's enqueues travel through. It runs on the wake's thread,
    so it closes that thread's connection after (back to Django's pool when one is configured) rather
    than holding one for the process's life. A wake on another channel needs a probe of its own."""

    def probe(payload: str) -> None:
        from django.db import connections

        connection = connections[alias]
        try:
            with connection.cursor() as cursor:
                cursor.execute(SQL_WAKE_PROBE, {"payload": payload})
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return probe


def conninfo_for(settings_dict: Mapping[str, Any]) -> str:
    """A libpq conninfo string for a Django ``DATABASES`` entry (``connections[alias].settings_dict``):
    NAME, USER, PASSWORD, HOST, PORT and the libpq keys of OPTIONS. Point it at the database the
    enqueues commit to — a notification never crosses databases."""
    options = settings_dict.get("OPTIONS") or {}
    params: dict[str, Any] = {
        key: value
        for key, value in options.items()
        if key not in _DJANGO_ONLY_OPTIONS and isinstance(value, str | int) and not isinstance(value, bool)
    }
    name = settings_dict.get("NAME")
    if name:
        params["dbname"] = name
    elif name is None:
        params.setdefault("dbname", "postgres")
    for key, libpq in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"), ("PORT", "port")):
        if settings_dict.get(key):
            params[libpq] = settings_dict[key]
    return make_conninfo("", **params)


def _session_conninfo(conninfo: str) -> str:
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise InvariantError(f"QueueWake(conninfo=...) does not parse: {exc}", {}) from exc
    for key, value in _SESSION_DEFAULTS.items():
        params.setdefault(key, value)
    return make_conninfo("", **params)


def _close_quietly(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.close()
    except Exception as exc:  # closing a broken socket may raise; there is nothing left to save
        log_event(logging.DEBUG, "jobs.wake.close-failed", error=repr(exc))
