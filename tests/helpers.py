"""Test helpers that are not fixtures."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from django.core.management import CommandError, call_command
from django.db import connection

from ultimate_jobs.contracts.operator import QueueStats

T = TypeVar("T")

_UNSET = object()


def eventually(fn: Callable[[], T], timeout: float = 5.0, interval: float = 0.01) -> T:
    """Poll ``fn`` until it returns a truthy value, and return that value.

    A falsy return or an ``AssertionError`` from ``fn`` means "not yet". After ``timeout``
    seconds this raises ``AssertionError`` naming the last value (or chaining the last
    assertion). This is the one bounded wait for things outside the frozen clock, such as
    worker processes::

        eventually(lambda: Job.objects.get(pk=job_id).state == "done")
    """
    deadline = time.monotonic() + timeout
    last: object = _UNSET
    last_error: AssertionError | None = None
    while True:
        try:
            value = fn()
        except AssertionError as exc:
            last_error = exc
        else:
            if value:
                return value
            last, last_error = value, None
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    if last_error is not None:
        raise AssertionError(f"condition not met within {timeout}s: {last_error}") from last_error
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}")


class BareDriver:
    """A hand-rolled driver with the queue protocol's reads and no operator surface (``operator`` is
    ``None``): what the operator answers ``X_NOT_IMPLEMENTED`` on. Its stats hold one queue, ``default``,
    with two ready rows."""

    name = "bare"
    alias = None
    visibility_timeout_ms = 30_000
    supports_wake = False
    supports_listen = False
    operator = None
    leases = None
    leader = None
    scheduler_state = None
    backfills = None

    def stats(self) -> list[QueueStats]:
        return [QueueStats(queue="default", ready=2)]


@dataclass
class Result:
    """One run of a management command: its exit code and what it printed."""

    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


def command(name: str, *args: str, err: io.StringIO | None = None) -> Result:
    """Run ``manage.py <name> <args>`` through ``call_command``. A non-zero exit is the ``CommandError``'s
    ``returncode`` (1: an operator error, 2: usage); a usage error's text is appended to ``err``."""
    out, err = io.StringIO(), err if err is not None else io.StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err)
        code = 0
    except CommandError as exc:
        code = exc.returncode
        if code == 2:
            err.write(str(exc))
    return Result(code, out.getvalue(), err.getvalue())


def many_posts(count: int, title: str) -> None:
    """Insert ``count`` ``tests.secapp.Post`` rows titled ``title`` with ``{i}`` replaced by 0, 1, …, in that
    (pk) order, in one statement the server runs (``generate_series``: no model built in Python, no row
    sent) — the rows ``bulk_create`` would write, for a backfill or an export to read."""
    from tests.secapp.models import Post

    table = connection.ops.quote_name(Post._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (title, slug) SELECT replace(%s, '{{i}}', i::text), '' "
            "FROM generate_series(0, %s - 1) AS i ORDER BY i",
            [title, count],
        )


REPO = Path(__file__).resolve().parents[1]


def manage_py(settings: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``python manage.py *argv`` in a real process with ``DJANGO_SETTINGS_MODULE=settings`` on this
    test's database (its rows must be committed: ``transactional_db``)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, "ULTIMATE_JOBS_TEST_DB": connection.settings_dict["NAME"]}
    argv_ = [sys.executable, "manage.py", *argv]
    return subprocess.run(argv_, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)


START_S = 30.0
"""How long a child's Django set-up may take, up to its first line."""
EXIT_S = 10.0
"""How long a child may take to exit after a signal."""
POLL_S = 0.05

_STARTED: list[Child] = []  # every child the running test started (its output goes into a failure's report)


class Child:
    """One child process of a test, in a process group of its own (``start_new_session``), so that
    :meth:`close` — every spawning fixture calls it at teardown — SIGKILLs whatever it started too (the
    roles' process of ``jobs_dev --reload``, a supervisor's workers), and a signal sent to the test's
    process group never reaches it. Daemon threads read its stdout (every line kept) and stderr (the
    tail); when the test fails, both are appended to its report (``tests/conftest.py``)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], *, cwd: Path | None = None) -> None:
        self.name = name
        self.popen = subprocess.Popen(
            args,
            cwd=cwd or REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        _STARTED.append(self)
        self.worker_id = ""
        self._lines: list[str] = []
        self._errors: deque[str] = deque(maxlen=300)
        self._lock = threading.Lock()
        assert self.popen.stdout is not None and self.popen.stderr is not None
        self._readers = [
            threading.Thread(target=self._pump, args=(self.popen.stdout, self._lines.append), daemon=True),
            threading.Thread(target=self._pump, args=(self.popen.stderr, self._errors.append), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, stream: IO[str], keep: Callable[[str], None]) -> None:
        for line in stream:
            with self._lock:
                keep(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    @property
    def stderr(self) -> str:
        with self._lock:
            return "\n".join(self._errors)

    def describe(self) -> str:
        return (
            f"{self.name} (pid {self.pid}, exit {self.popen.poll()}): stdout={self.lines[-20:]} "
            f"stderr=...{self.stderr[-3000:]}"
        )

    def output(self) -> str:
        """What a failed test's report shows of this child: its exit, its last stdout lines, its stderr tail."""
        stdout = "\n".join(self.lines[-100:])
        head = f"pid {self.pid}, exit {self.popen.poll()}"
        return f"{head}\n--- stdout (the last 100 lines)\n{stdout}\n--- stderr (the tail)\n{self.stderr}"

    def line(self, index: int, timeout: float = START_S) -> str:
        """Stdout line ``index`` (0-based), once it is written; fails at once if the child exits first."""

        def written() -> str:
            exited = self.popen.poll() is not None
            if exited:
                for reader in self._readers:
                    reader.join(EXIT_S)  # every line the child wrote before it exited is read
            lines = self.lines
            if len(lines) > index:
                return lines[index]
            if exited:
                raise RuntimeError(f"the child exited before writing line {index}: {self.describe()}")
            raise AssertionError(f"{self.name} has written {len(lines)} lines")

        try:
            return eventually(written, timeout=timeout, interval=POLL_S)
        except AssertionError as exc:
            raise AssertionError(f"no line {index} within {timeout}s: {self.describe()}") from exc

    def send(self, text: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(text + "\n")
        self.popen.stdin.flush()

    def signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the child itself (``kill PID``), not to what it started."""
        self.popen.send_signal(signum)

    def signal_group(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the child's whole process group, as Ctrl-C in its terminal would."""
        os.killpg(self.pid, signum)

    def wait(self, timeout: float = EXIT_S) -> int:
        return self.popen.wait(timeout=timeout)

    def finished_lines(self, timeout: float = EXIT_S) -> list[str]:
        """Every stdout line, once the child has exited (waited for up to ``timeout``) and its output is read."""
        self.popen.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout)
        return self.lines

    def close(self) -> None:
        """SIGKILL the child's process group (whatever of it still runs), reap the child, close its pipes."""
        with contextlib.suppress(ProcessLookupError):  # every process of the group has exited
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait(timeout=EXIT_S)
        for reader in self._readers:
            reader.join(EXIT_S)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()


def started_children() -> list[Child]:
    """The children the running test started."""
    return list(_STARTED)


def forget_children() -> None:
    """Start a new test's list of children."""
    _STARTED.clear()
