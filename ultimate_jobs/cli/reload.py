"""``jobs_dev --reload``: the roles under Django's autoreloader, drained on every way out.

Two processes, as ``runserver`` runs: the reloader starts the roles' process (the same command, marked
by Django's ``RUN_MAIN`` variable) and starts it again each time it exits with code 3 — a watched file
changed, and the roles drained first. Django's own loop (``autoreload.run_with_reloader``) is not used
because of what it does to a process holding jobs: on Ctrl-C the reloader SIGKILLs its child a quarter
of a second later, on SIGTERM at once, and the child's roles run on a thread that no signal reaches, so
jobs in flight were never handed back. Here:

- SIGINT or SIGTERM to the reloader is passed on to the roles' process, and the reloader waits for its
  drain, SIGKILLing it only past the drain deadline and a grace;
- the roles' process drains on SIGINT or SIGTERM: its main thread runs the file watcher, where the
  handlers only note the signal (a handler must take no lock: Ctrl-C reaches this process and the
  reloader, which passes it on, and a second handler run inside the first one's lock would deadlock the
  main thread); a watch thread asks the roles to drain, and the watcher stops once they have;
- both install their handlers even when started with SIGINT ignored (a background job of a
  non-interactive shell — a CI script's — inherits SIGINT ignored, and Python then leaves it so);
- a roles' process whose reloader is gone (SIGKILLed: its parent pid changes) drains and exits by itself.

>>> sys.exit(run_reloader(deadline_ms=25_000))  # the reloader
>>> ReloadedRoles(build_roles, say=print).run()  # the roles' process, when under_reloader()
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from django.utils import autoreload

from ..runtime.lifecycle import Roles

RELOAD_EXIT_CODE = 3
"""What the roles' process exits with to be started again (Django's ``trigger_reload``)."""
EXIT_GRACE_S = 5.0
"""What a roles' process gets past the drain deadline to exit: the watcher's last tick, the teardown."""
WATCH_POLL_S = 0.2
"""How often the reloader and the roles' process act on a signal noted by their handlers, and the roles'
process looks whether its reloader is still its parent."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def under_reloader() -> bool:
    """Whether this process is the roles' process a reloader started (not the reloader itself)."""
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


def run_reloader(*, deadline_ms: int) -> int:
    """The reloader: run the roles' process until it exits with anything but the reload code, and answer
    that exit status (``128 + n`` for a death by signal ``n``). SIGINT and SIGTERM are passed on to it; it
    is SIGKILLed if it still runs ``deadline_ms`` plus :data:`EXIT_GRACE_S` after the first."""
    return _Reloader(deadline_ms).run()


class _Reloader:
    def __init__(self, deadline_ms: int) -> None:
        self._deadline_s = deadline_ms / 1000
        self._signals: list[int] = []  # noted by the handler, passed on by the main loop

    def run(self) -> int:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)
        env = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
        argv = [str(arg) for arg in autoreload.get_child_arguments()]
        while True:
            code = self._wait(subprocess.Popen(argv, env=env, close_fds=False))
            if code != RELOAD_EXIT_CODE or self._signals:
                return code if code >= 0 else 128 - code

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signals.append(signum)

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        """Wait for ``child`` to exit, passing each signal on to it; SIGKILL it past the bound."""
        passed = 0
        kill_at: float | None = None
        while True:
            try:
                return child.wait(timeout=WATCH_POLL_S)
            except subprocess.TimeoutExpired:
                pass
            for signum in self._signals[passed:]:
                child.send_signal(signum)
                passed += 1
                if kill_at is None:
                    kill_at = time.monotonic() + self._deadline_s + EXIT_GRACE_S
            if kill_at is not None and time.monotonic() >= kill_at:
                child.kill()


class ReloadedRoles:
    """The roles' process under a reloader: ``build`` (called on Django's ``django-main-thread``) answers
    the roles, which run until a signal, a lost reloader or a changed file drains them; the main thread
    watches the files. ``say`` prints a line to the console."""

    def __init__(self, build: Callable[[], Roles], *, say: Callable[[str], None]) -> None:
        self._build = build
        self._say = say
        self._watcher = autoreload.get_reloader()
        self._parent = os.getppid()
        self._lock = threading.Lock()
        self._group: Roles | None = None
        self._stop_reason: str | None = None
        self._signalled: str | None = None  # noted by the handler, acted on by the watch thread
        self._served = threading.Event()

    def run(self) -> None:
        """Serve until stopped: returns after a signal's or a lost reloader's drain; exits the process with
        :data:`RELOAD_EXIT_CODE` after a changed file's drain."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)
        threading.Thread(target=self._watch, name="jobs-dev-watch", daemon=True).start()
        autoreload.file_changed.connect(self._on_change, weak=False)
        autoreload.start_django(self._watcher, self._serve)

    def stop(self, reason: str) -> None:
        """Drain the roles and end the process (no restart); at once if the roles are not running."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
            group = self._group
            if self._served.is_set():  # the roles ended already (or never started: build raised)
                self._watcher.stop()
        if group is not None:
            group.request_drain(reason)

    def _serve(self) -> None:
        try:
            group = self._build()
            with self._lock:
                self._group = group
                reason = self._stop_reason
            if reason is not None:
                group.request_drain(reason)
            group.run(install_signals=False)
        finally:
            with self._lock:
                self._served.set()
                if self._stop_reason is not None:
                    self._watcher.stop()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signalled = signal.Signals(signum).name

    def _watch(self) -> None:
        """Until the process is told to stop: by a signal its handler noted, or by its reloader's end."""
        while True:
            time.sleep(WATCH_POLL_S)
            if self._signalled is not None:
                self.stop(self._signalled)
                return
            if os.getppid() != self._parent:
                self._say("jobs_dev: the reloader is gone; draining, then exiting")
                self.stop("reloader-gone")
                return

    def _on_change(self, sender: object, file_path: object, **kwargs: object) -> bool:
        """Answers whether the change is handled here — a true answer keeps Django's watcher from exiting
        with the reload code: the process is stopping, not restarting."""
        with self._lock:
            group, stopping = self._group, self._stop_reason is not None
        if stopping:
            return True
        if group is None:  # the roles did not start (their error is printed): restart at once, as runserver
            return False
        self._say(f"jobs_dev: {file_path} changed; draining, then restarting")
        group.request_drain("reload")
        self._served.wait(group.drain_deadline_ms / 1000 + EXIT_GRACE_S)
        with self._lock:
            return self._stop_reason is not None  # a signal during the reload's drain: stop, do not restart
