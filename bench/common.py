"""What every benchmark process shares — ours and the peers' — using only the standard library and psycopg.

The peers run from a separate virtualenv (``bench/.peers-venv``) as ``python -m bench.peers.<name>``, so
nothing here may import Django or ``ultimate_jobs``.

The worker-process protocol (one per library, spawned by :class:`WorkerProcess`): the child sets itself
up, prints ``READY`` and blocks on a ``GO`` line on stdin, so every throughput figure starts when the
worker is built and connected, never while Python imports. After ``GO`` it serves ``COUNT`` lines on
stdin, answering ``COUNT <n>``: the statements its psycopg cursors have sent since it started (see
:func:`count_statements`). SIGTERM stops it the way the library's own worker command is stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

PG_HOST = os.environ.get("BENCH_PGHOST", "127.0.0.1")
PG_PORT = os.environ.get("BENCH_PGPORT", "5432")
PG_USER = os.environ.get("BENCH_PGUSER", "postgres")
PG_PASSWORD = os.environ.get("BENCH_PGPASSWORD", "")

LATENCY_TABLE = "bench_latency"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
ROOT = Path(__file__).resolve().parent.parent


def conninfo(dbname: str) -> str:
    """A libpq conninfo for ``dbname`` on the bench server."""
    parts = {"host": PG_HOST, "port": PG_PORT, "user": PG_USER, "dbname": dbname}
    if PG_PASSWORD:
        parts["password"] = PG_PASSWORD
    return " ".join(f"{k}={v}" for k, v in parts.items())


def ensure_database(dbname: str) -> bool:
    """Create ``dbname`` when it is missing; answers whether it was created."""
    with psycopg.connect(conninfo("postgres"), autocommit=True) as conn:
        if conn.execute("select 1 from pg_database where datname = %s", (dbname,)).fetchone():
            return False
        conn.execute(f'create database "{dbname}"')
        return True


def connect(dbname: str) -> psycopg.Connection[Any]:
    """An autocommit connection to ``dbname``."""
    return psycopg.connect(conninfo(dbname), autocommit=True)


def ensure_latency_table(conn: psycopg.Connection[Any]) -> None:
    """The table a probe job writes its pickup latency into: ``(kind, latency_ms)``."""
    conn.execute(f"create table if not exists {LATENCY_TABLE} (kind text not null, latency_ms double precision)")


def latencies(conn: psycopg.Connection[Any], kind: str) -> list[float]:
    """Every latency (ms) the probe jobs of ``kind`` recorded."""
    rows = conn.execute(f"select latency_ms from {LATENCY_TABLE} where kind = %s", (kind,)).fetchall()
    return [float(r[0]) for r in rows]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    """Median, p95 and max of ``values`` (ms)."""
    return {
        "median": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "max": max(values) if values else float("nan"),
        "n": float(len(values)),
    }


def median_of(runs: Sequence[float]) -> float:
    """The median of per-run figures (NaN when none)."""
    finite = [r for r in runs if r == r]
    return statistics.median(finite) if finite else float("nan")


def wait_until(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.05, what: str = "") -> None:
    """Poll ``predicate`` until it holds; ``TimeoutError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what or predicate}")
        time.sleep(interval)


def rss_kb(pid: int) -> int:
    """A process's resident set size (``VmRSS`` of ``/proc/<pid>/status``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class LogFields(logging.Filter):
    """Give every record a ``jobs`` attribute (ultimate_jobs puts an event's facts there) so one format
    string serves all loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "jobs"):
            record.jobs = ""
        return True


def emit(record: dict[str, Any]) -> None:
    """Print one JSON line (what a peer script answers)."""
    print(json.dumps(record, default=str), flush=True)


# -- statement counting (child side) -----------------------------------------------------------------

_statements = 0
_count_lock = threading.Lock()


def count_statements() -> None:
    """Count every statement this process sends through a psycopg cursor (sync and async, including the
    cursors Django and the peers' drivers build — they all end in ``execute``/``executemany``/``copy``).
    This is the fallback when ``pg_stat_statements`` is not loaded: it sees exactly the worker's own
    traffic, nothing of the bench's."""

    def wrap(cls: type, name: str, is_async: bool) -> None:
        original = getattr(cls, name)

        def bump() -> None:
            global _statements
            with _count_lock:
                _statements += 1

        if is_async:

            async def counted_async(self: Any, *args: Any, **kwargs: Any) -> Any:
                bump()
                return await original(self, *args, **kwargs)

            setattr(cls, name, counted_async)
        elif name == "copy":

            @contextlib.contextmanager
            def counted_copy(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
                bump()
                with original(self, *args, **kwargs) as copy:
                    yield copy

            setattr(cls, name, counted_copy)
        else:

            def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
                bump()
                return original(self, *args, **kwargs)

            setattr(cls, name, counted)

    for name in ("execute", "executemany", "copy"):
        wrap(psycopg.Cursor, name, False)
    for name in ("execute", "executemany"):
        wrap(psycopg.AsyncCursor, name, True)


def statements_sent() -> int:
    """Statements counted since :func:`count_statements` was installed."""
    with _count_lock:
        return _statements


def announce_ready_and_wait_for_go() -> None:
    """The child's half of the start: print ``READY``, block until ``GO``, then serve ``COUNT`` on a thread."""
    print("READY", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "GO":
        raise SystemExit(f"expected GO on stdin, got {line!r}")

    def serve() -> None:
        for command in sys.stdin:
            if command.strip() == "COUNT":
                print(f"COUNT {statements_sent()}", flush=True)

    threading.Thread(target=serve, name="bench-commands", daemon=True).start()


# -- worker processes (parent side) ------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """A worker child speaking the READY/GO/COUNT protocol. Its stderr goes to ``log_path``."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    proc: subprocess.Popen[str] | None = None

    def start(self) -> WorkerProcess:
        """Spawn the child and wait for its ``READY``."""
        log = open(self.log_path, "a") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
        )
        self._expect("READY", READY_TIMEOUT_S)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _send(self, line: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _expect(self, prefix: str, timeout: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        result: list[str] = []

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith(prefix):
                    result.append(line.strip())
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if not result:
            code = self.proc.poll()
            tail = self.log_tail()
            self.kill()
            raise RuntimeError(f"worker {self.argv} never said {prefix} (exit {code}); its stderr ends:\n{tail}")
        return result[0]

    def go(self) -> None:
        """Let the child start working."""
        self._send("GO")

    def statements(self) -> int:
        """Statements the child has sent so far (it must count them: see :func:`count_statements`)."""
        self._send("COUNT")
        return int(self._expect("COUNT", 10.0).split()[1])

    def rss_kb(self) -> int:
        """The child's resident set size now, in KiB."""
        return rss_kb(self.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (the library's own drain), then SIGKILL if it outlives ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def workers(specs: Sequence[WorkerProcess]) -> Iterator[list[WorkerProcess]]:
    """Start every worker (all READY), yield them, and always stop them."""
    started: list[WorkerProcess] = []
    try:
        for spec in specs:
            started.append(spec.start())
        yield started
    finally:
        for worker in started:
            worker.stop()


def go_all(procs: Sequence[WorkerProcess]) -> float:
    """Send GO to every worker; answers the wall time (epoch seconds) just before the first GO."""
    t0 = time.time()
    for proc in procs:
        proc.go()
    return t0


def check_alive(procs: Sequence[WorkerProcess]) -> Callable[[], None]:
    """A guard for polling loops: raise at once when a worker died instead of waiting out a timeout."""

    def check() -> None:
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"worker {proc.argv} died; its stderr ends:\n{proc.log_tail()}")

    return check


# -- the pacing of probe enqueues --------------------------------------------------------------------


def paced(count: int, interval_s: float) -> Iterator[int]:
    """Yield ``0..count-1``, the i-th no earlier than ``i * interval_s`` after the first (no drift)."""
    start = time.monotonic()
    for i in range(count):
        delay = start + i * interval_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield i


def settle_latencies(conn: psycopg.Connection[Any], kind: str, expected: int, timeout: float = 30.0) -> list[float]:
    """Wait until ``expected`` probes of ``kind`` have written their latency; answer them all."""
    wait_until(
        lambda: len(latencies(conn, kind)) >= expected, timeout=timeout, interval=0.1, what=f"{expected} {kind} probes"
    )
    return latencies(conn, kind)
