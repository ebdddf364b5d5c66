"""``jobs_worker --processes N``: one supervisor over N worker processes, so one command uses every core.

Each child is ``manage.py jobs_worker`` run again — the same interpreter, script (or ``-m django``),
settings, queues, concurrency, async concurrency and drain deadline, without ``--processes`` — so it is a normal worker
with its own slots, heartbeat and two-phase drain. The supervisor:

- starts a replacement for a child that exits on its own: at once after a recycle
  (:data:`~ultimate_jobs.worker.recycle.EXIT_RECYCLED`), else after a backoff that doubles per quick
  crash (1 s, 2 s, 4 s … 30 s) and resets once a child lived 30 s;
- on SIGTERM/SIGINT forwards SIGTERM to every child, waits for them up to the drain deadline plus
  :data:`STOP_MARGIN_S`, SIGKILLs the stragglers and returns (a second signal SIGKILLs at once, within a
  :data:`TICK_S`). The handler only notes the signal; the loop of :meth:`Supervisor.run` acts on it.

Lifecycle: :meth:`Supervisor.start`, :meth:`Supervisor.run_once` (reap and restart; tests drive it),
:meth:`Supervisor.stop`, and :meth:`Supervisor.run` for the command.
"""

from __future__ import annotations

import logging
import os
import signal as os_signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..conf import jobs_settings
from ..core.durations import parse_duration
from ..core.logs import log_event
from .recycle import EXIT_RECYCLED, parse_count

STOP_MARGIN_S = 5.0  # past the drain deadline: a child's driver close and interpreter exit
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_S = 30.0  # a child that lived this long before exiting resets its slot's crash streak
TICK_S = 0.2

# the options a child is run with, as (option dest, flag); --processes is never passed on
_PASSED_ON = (
    ("queues", "--queues"),
    ("drain_deadline", "--drain-deadline"),
    ("max_jobs", "--max-jobs"),
    ("max_memory", "--max-memory"),
    ("settings", "--settings"),
    ("pythonpath", "--pythonpath"),
    ("verbosity", "--verbosity"),
)
_PASSED_ON_SWITCHES = (("traceback", "--traceback"), ("no_color", "--no-color"), ("force_color", "--force-color"))


def parse_processes(value: str | int | None) -> int:
    """``--processes N`` (absent: 1)."""
    if value is None:
        return 1
    return parse_count(value, field="--processes", what="how many worker processes to run")


def relaunch_prefix(*, from_command_line: bool) -> list[str]:
    """How this process was started, up to the command name: ``[python, manage.py]``,
    ``[python, -m, django]``, interpreter options kept. From ``call_command`` (no command line of its
    own): ``[python, -m, django]``, with ``DJANGO_SETTINGS_MODULE`` naming the settings."""
    if not from_command_line:
        return [sys.executable, "-m", "django"]
    command_args = len(sys.argv) - 1  # the command name and its options, the tail of orig_argv
    head = sys.orig_argv[: len(sys.orig_argv) - command_args]
    return [sys.executable, *head[1:]]


def child_argv(options: Mapping[str, Any], *, prefix: Sequence[str], slot: int, supervisor_pid: int) -> list[str]:
    """The command line of the child in ``slot``: ``jobs_worker`` with the parent's options but
    ``--processes``; ``--metrics-port P`` becomes ``P + slot`` so each child serves its own counters."""
    argv = [*prefix, "jobs_worker", "--supervisor-pid", str(supervisor_pid)]
    for dest, flag in _PASSED_ON:
        if options.get(dest) is not None:
            argv += [flag, str(options[dest])]
    for value in options.get("concurrency") or ():
        argv += ["--concurrency", value]
    for value in options.get("async_concurrency") or ():
        argv += ["--async-concurrency", value]
    if options.get("metrics_port") is not None:
        argv += ["--metrics-port", str(int(options["metrics_port"]) + slot)]
    argv += [flag for dest, flag in _PASSED_ON_SWITCHES if options.get(dest)]
    return argv


@dataclass
class _Slot:
    """One of the N places a child runs in; its replacements take the same slot."""

    index: int
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    streak: int = 0  # exits in a row that were not recycles, each after a short life
    restart_at: float = 0.0
    starts: int = 0


class Supervisor:
    """N worker processes, each started by ``argv_for(slot)``.

    >>> Supervisor(processes=4, argv_for=lambda slot: [...], drain_deadline_ms=25_000).run()
    """

    def __init__(
        self,
        *,
        processes: int,
        argv_for: Callable[[int], list[str]],
        drain_deadline_ms: int,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.processes = parse_processes(processes)
        self.drain_deadline_ms = drain_deadline_ms
        self._argv_for = argv_for
        self._env = dict(env) if env is not None else None
        self._slots = [_Slot(i) for i in range(self.processes)]
        self._stop = threading.Event()
        self._reason = "stop"
        # (signal, whether a stop was already asked for): noted by the handler, acted on by run() and stop()
        self._signals: list[tuple[int, bool]] = []

    # -- lifecycle -----------------------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> bool:
        """Start every child, restart the ones that exit, and stop them all on SIGTERM/SIGINT (or
        :meth:`request_stop`). Answers whether every child exited inside the bound (none SIGKILLed)."""
        if install_signals:
            for signum in (os_signal.SIGTERM, os_signal.SIGINT):
                os_signal.signal(signum, self._on_signal)
        self.start()
        while not self._stop.wait(TICK_S):
            if self._signals:
                self.request_stop(os_signal.Signals(self._signals[0][0]).name)
            else:
                self.run_once()
        return self.stop()

    def _on_signal(self, signum: int, _frame: object) -> None:
        """Only note the signal: Python runs a handler on the main thread between two bytecodes, possibly
        inside a lock the main thread holds (the one of the ``Event`` :meth:`run` waits on) or inside the
        first signal's handler, so a handler that took a lock could deadlock the process it should stop.
        A list append takes none, and ``Event.is_set()`` reads a flag without its lock."""
        self._signals.append((signum, self._stop.is_set()))

    def _forced(self) -> bool:
        """Whether a signal came on top of a stop — a second Ctrl-C, or one after :meth:`request_stop` —
        which SIGKILLs what still runs."""
        noted = list(self._signals)
        return len(noted) > 1 or any(after_stop for _, after_stop in noted)

    def request_stop(self, reason: str = "stop") -> None:
        """Ask :meth:`run` to stop the children (what a noted signal makes it do)."""
        if not self._stop.is_set():
            self._reason = reason
        self._stop.set()

    def start(self) -> None:
        log_event(logging.INFO, "jobs.supervisor.started", pid=os.getpid(), processes=self.processes)
        now = time.monotonic()
        for slot in self._slots:
            self._spawn(slot, now)

    def run_once(self, now: float | None = None) -> int:
        """Reap every child that exited and start those whose restart is due; answers how many started."""
        now = time.monotonic() if now is None else now
        started = 0
        for slot in self._slots:
            if slot.popen is not None and slot.popen.poll() is not None:
                self._reaped(slot, now)
            if slot.popen is None and now >= slot.restart_at and not self._stop.is_set():
                started += self._spawn(slot, now)
        return started

    def stop(self) -> bool:
        """SIGTERM every child, wait up to the drain deadline plus :data:`STOP_MARGIN_S`, SIGKILL the rest.
        Answers whether none had to be killed."""
        self._stop.set()
        live = self._live()
        log_event(logging.INFO, "jobs.supervisor.stopping", signal=self._reason, children=[p.pid for p in live])
        for popen in live:
            popen.send_signal(os_signal.SIGTERM)  # a no-op for a child already reaped
        deadline = time.monotonic() + self.drain_deadline_ms / 1000 + STOP_MARGIN_S
        while self._live() and time.monotonic() < deadline and not self._forced():
            time.sleep(TICK_S)
        stragglers = self._live()
        for popen in stragglers:
            popen.kill()
        for slot in self._slots:
            if slot.popen is not None:
                slot.popen.wait()
                self._log_exit(slot, "stopped", restart_in_s=None)
                slot.popen = None
        log_event(
            logging.ERROR if stragglers else logging.INFO,
            "jobs.supervisor.stopped",
            killed=[p.pid for p in stragglers],
        )
        return not stragglers

    # -- children ------------------------------------------------------------------------------

    def pids(self) -> list[int]:
        """The pids of the children running now."""
        return [p.pid for p in self._live()]

    def _live(self) -> list[subprocess.Popen[bytes]]:
        return [s.popen for s in self._slots if s.popen is not None and s.popen.poll() is None]

    def _spawn(self, slot: _Slot, now: float) -> int:
        try:
            slot.popen = subprocess.Popen(self._argv_for(slot.index), env=self._env)
        except OSError as exc:  # no process to be had (EAGAIN, EMFILE): try again after the backoff
            slot.streak += 1
            slot.restart_at = now + _backoff_s(slot.streak)
            log_event(logging.ERROR, "jobs.supervisor.spawn-failed", slot=slot.index, error=repr(exc))
            return 0
        slot.started_at = now
        slot.starts += 1
        log_event(logging.INFO, "jobs.supervisor.child-started", slot=slot.index, pid=slot.popen.pid, start=slot.starts)
        return 1

    def _reaped(self, slot: _Slot, now: float) -> None:
        assert slot.popen is not None
        code = slot.popen.returncode
        if code == EXIT_RECYCLED:
            slot.streak, delay, how = 0, 0.0, "recycled"
        else:
            slot.streak = 1 if now - slot.started_at >= STABLE_S else slot.streak + 1
            delay, how = _backoff_s(slot.streak), ("exited" if code == 0 else "crashed")
        slot.restart_at = now + delay
        self._log_exit(slot, how, restart_in_s=delay)
        slot.popen = None

    def _log_exit(self, slot: _Slot, how: str, *, restart_in_s: float | None) -> None:
        assert slot.popen is not None
        code = slot.popen.returncode
        log_event(
            logging.WARNING if how == "crashed" else logging.INFO,
            "jobs.supervisor.child-exited",
            slot=slot.index,
            pid=slot.popen.pid,
            how=how,
            exit_code=code if code >= 0 else None,
            signal=os_signal.Signals(-code).name if code < 0 else None,
            restart_in_s=restart_in_s,
        )


def _backoff_s(streak: int) -> float:
    return float(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, streak - 1)))


def supervisor_from_options(options: Mapping[str, Any], *, processes: int, from_command_line: bool) -> Supervisor:
    """The supervisor ``jobs_worker --processes N`` runs: each child re-runs this command line; the stop
    waits ``--drain-deadline`` (else ``ULTIMATE_JOBS['DRAIN_DEADLINE']``) plus the margin."""
    from django.conf import settings

    deadline = options.get("drain_deadline")
    drain_deadline_ms = (
        parse_duration(deadline, field="--drain-deadline") if deadline else jobs_settings().drain_deadline_ms
    )
    prefix = relaunch_prefix(from_command_line=from_command_line)
    env = dict(os.environ)
    if settings.SETTINGS_MODULE:
        env.setdefault("DJANGO_SETTINGS_MODULE", settings.SETTINGS_MODULE)
    pid = os.getpid()
    return Supervisor(
        processes=processes,
        argv_for=lambda slot: child_argv(options, prefix=prefix, slot=slot, supervisor_pid=pid),
        drain_deadline_ms=drain_deadline_ms,
        env=env,
    )
