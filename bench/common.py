"""What every benchmark process shares — ours, the bare loop's and the peers' — using only the standard
library and psycopg.

The peers run from a separate virtualenv (``bench/.peers-venv``) as ``python -m bench.peers.<name>``, so
nothing here may import Django or ``ultimate_jobs``.

A worker process (:class:`WorkerProcess`) starts working as soon as it is built: the bench spawns it, and
every drain clock starts at that spawn. The child's first line on stdout says it is up (ours: the
``worker … serving …`` line ``manage.py jobs_worker`` prints; the others print ``READY``); the bench only
waits for that line where a case needs an idle worker. SIGTERM stops it the way the library's own
worker command is stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import statistics
import struct
import subprocess
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
IO_SLEEP_S = 0.05
"""What an I/O-bound body of the io case waits (``await asyncio.sleep``, or ``time.sleep`` in a sync body): the
stand-in for an HTTP call."""
IO_TABLE = "bench_rows"
"""The rows an io case's ``orm`` body reads and writes: ours' ``BenchRow`` table, created alike in the peers'
databases."""
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
ROOT = Path(__file__).resolve().parent.parent
SQLITE_FILE = ROOT / "bench" / "results" / "sqlite" / "bench.sqlite3"
"""The SQLite column's database file (``bench/sqlite.py``), copied fresh from its template per measurement."""


def compile_checkout() -> None:
    """Byte-compile this checkout's ``ultimate_jobs`` and ``bench`` (the peers' bench modules too), as ``pip
    install`` compiles an installed package: every library then starts its workers from ``.pyc`` files —
    the peers' packages and Django already are, and ``PYTHONDONTWRITEBYTECODE`` (set on some machines)
    would otherwise have ours compile its source again in every worker it spawns."""
    import compileall

    for folder in ("ultimate_jobs", "bench"):
        if not compileall.compile_dir(ROOT / folder, quiet=1):
            raise RuntimeError(f"python -m compileall {folder} failed: the checkout has a syntax error")


def conninfo(dbname: str) -> str:
    """A libpq conninfo for ``dbname`` on the bench server."""
    parts = {"host": PG_HOST, "port": PG_PORT, "user": PG_USER, "dbname": dbname}
    if PG_PASSWORD:
        parts["password"] = PG_PASSWORD
    return " ".join(f"{k}={v}" for k, v in parts.items())


def dsn(dbname: str) -> str:
    """A ``postgresql://`` URL for ``dbname`` on the bench server (what asyncpg takes)."""
    password = f":{PG_PASSWORD}" if PG_PASSWORD else ""
    return f"postgresql://{PG_USER}{password}@{PG_HOST}:{PG_PORT}/{dbname}"


def connect(dbname: str) -> psycopg.Connection[Any]:
    """An autocommit connection to ``dbname``."""
    return psycopg.connect(conninfo(dbname), autocommit=True)


# -- databases: each library its own, freshly created for every measurement ------------------------------


def template_of(dbname: str) -> str:
    return f"{dbname}_template"


def recreate_database(dbname: str, *, template: str | None = None) -> None:
    """Drop ``dbname`` (ending its sessions) and create it anew, empty or as a copy of ``template``."""
    with psycopg.connect(conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'drop database if exists "{dbname}" with (force)')
        conn.execute(f'create database "{dbname}"' + (f' template "{template}"' if template else ""))


def make_template(dbname: str, install: Callable[[], None]) -> None:
    """Create ``dbname`` empty, let ``install`` put the library's schema (and the latency table) into it,
    then copy it to ``<dbname>_template``: every measurement starts from a fresh copy of that."""
    recreate_database(dbname)
    install()
    with connect(dbname) as conn:
        ensure_latency_table(conn)
    recreate_database(template_of(dbname), template=dbname)


def fresh_database(dbname: str) -> None:
    """A freshly created ``dbname``: a copy of its template (schema only, no rows)."""
    recreate_database(dbname, template=template_of(dbname))


def vacuum_analyze(dbname: str) -> None:
    with connect(dbname) as conn:
        conn.execute("vacuum analyze")


def wal_position(conn: psycopg.Connection[Any]) -> int:
    """The server's WAL insert position, in bytes."""
    row = conn.execute("select pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def row_updates(dbname: str) -> tuple[int, int]:
    """``(updates, HOT updates)`` of every table of ``dbname`` so far (``pg_stat_user_tables``), read once the
    counts stopped moving: a backend reports its counts when it goes idle or ends, not at each update."""
    query = "select coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0) from pg_stat_user_tables"
    last: tuple[int, int] | None = None
    for _ in range(20):
        with connect(dbname) as conn:
            row = conn.execute(query).fetchone()
        now = (int(row[0]), int(row[1])) if row else (0, 0)
        if now == last:
            return now
        last = now
        time.sleep(0.25)
    assert last is not None
    return last


def ensure_latency_table(conn: psycopg.Connection[Any]) -> None:
    """The table a probe job's body writes its start into: ``(kind, n, started)``, ``started`` the body's
    wall clock (epoch seconds) when it began."""
    conn.execute(
        f"create table if not exists {LATENCY_TABLE} (kind text not null, n integer not null, started double precision)"
    )


def seed_io_rows(conn: psycopg.Connection[Any], n: int) -> None:
    """Rows ``1..n`` of :data:`IO_TABLE` at ``value = 0`` (the table created when the library's schema lacks it):
    job ``i`` of an io drain reads and writes row ``i``."""
    conn.execute(
        f"create table if not exists {IO_TABLE} (id bigint generated by default as identity primary key,"
        " value integer not null default 0)"
    )
    conn.execute(f"insert into {IO_TABLE} (id, value) select g, 0 from generate_series(1, %s) as g", (n,))


def io_rows_written(conn: psycopg.Connection[Any]) -> int:
    """How many :data:`IO_TABLE` rows an ``orm`` body has written (``value`` 1; each is written once)."""
    row = conn.execute(f"select count(*) from {IO_TABLE} where value = 1").fetchone()
    return int(row[0]) if row else 0


def probe_starts(conn: psycopg.Connection[Any], kind: str) -> dict[int, float]:
    """``n -> started`` of every probe of ``kind`` whose body has run."""
    rows = conn.execute(f"select n, started from {LATENCY_TABLE} where kind = %s", (kind,)).fetchall()
    return {int(r[0]): float(r[1]) for r in rows}


# -- statistics ----------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


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


class RssSampler:
    """Samples a process's ``VmRSS`` (KiB) every ``interval`` seconds on a thread of its own, with the wall
    clock of each sample, until :meth:`stop` (or the process ends)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval_s = interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), rss_kb(self.pid)))
            except (OSError, RuntimeError):  # the process is gone
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak_between(self, start: float, end: float) -> float:
        """The largest sample taken between ``start`` and ``end`` (epoch s); the largest of all when none
        fell in that window (a drain too short to sample in its middle)."""
        inside = [kb for at, kb in self.samples if start <= at <= end]
        chosen = inside or [kb for _, kb in self.samples]
        return float(max(chosen)) if chosen else float("nan")


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int | str) -> list[str]:
    """``/proc/<pid>/stat`` after the command name: field 3 (state) is ``[0]``."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _processes() -> list[tuple[int, int, str]]:
    """Every process as ``(pid, parent pid, command name)``."""
    out: list[tuple[int, int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        out.append((int(entry.name), int(text.rsplit(")", 1)[1].split()[1]), name))
    return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) of ``pid`` and the processes below it now — a worker that
    runs its jobs in child processes is measured whole."""
    table = _processes()
    wanted, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, ppid, _ in table if ppid == parent and p not in wanted]
        wanted.update(children)
        frontier.extend(children)
    total = 0
    for member in wanted:
        try:
            fields = _stat_fields(member)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def postgres_cpu_s() -> float:
    """CPU seconds of the PostgreSQL server on this machine: every ``postgres`` process now (backends,
    background workers), plus what its ended backends used (the postmaster's children's time)."""
    table = _processes()
    server = [(p, ppid) for p, ppid, name in table if name.startswith("postgres")]
    pids = {p for p, _ in server}
    total = 0
    for member, parent in server:
        try:
            fields = _stat_fields(member)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        if parent not in pids:  # the postmaster: its reaped children's time too
            total += int(fields[13]) + int(fields[14])
    return total / CLOCK_TICKS


class CpuSampler:
    """Samples the CPU seconds of worker process trees and of the PostgreSQL server every ``interval``
    seconds on a thread of its own, with the wall clock of each sample, until :meth:`stop`."""

    def __init__(self, pids: Sequence[int], interval: float = 0.1) -> None:
        self.pids = list(pids)
        self.interval_s = interval
        self.samples: list[tuple[float, float, float]] = []  # (epoch s, workers' CPU s, server's CPU s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpu", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), sum(tree_cpu_s(pid) for pid in self.pids), postgres_cpu_s()))
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def per_job_between(self, start: float, end: float, jobs: float) -> tuple[float, float]:
        """Microseconds of CPU per job, (workers, server), between ``start`` and ``end`` (epoch s) while
        ``jobs`` finished at a steady rate: the CPU between the first and the last sample inside the window
        over the jobs of that part of it; NaN when the window holds fewer than two samples."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2 or jobs <= 0:
            return float("nan"), float("nan")
        (t0, w0, p0), (t1, w1, p1) = inside[0], inside[-1]
        share = jobs * (t1 - t0) / (end - start)  # the jobs of the sampled part of the window
        return 1e6 * (w1 - w0) / share, 1e6 * (p1 - p0) / share


class LogFields(logging.Filter):
    """Give every record a ``jobs`` attribute (ultimate_jobs puts an event's facts there) so one format
    string serves all loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "jobs"):
            record.jobs = ""
        return True


class EventOnly(logging.Filter):
    """Pass only the records of one ultimate_jobs event (its log message is the event's name): the rates case's
    workers write every ``jobs.job.rate-limited`` — a run handed back to wait for its reserved instant — to a file
    the bench counts."""

    def __init__(self, event: str) -> None:
        super().__init__()
        self.event = event

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg == self.event


def emit(record: dict[str, Any]) -> None:
    """Print one JSON line (what a peer script answers)."""
    print(json.dumps(record, default=str), flush=True)


def announce_ready() -> None:
    """A worker child's 'I am built and connected' line (the bench reads the first stdout line)."""
    print("READY", flush=True)


# -- statement counting (child side; the idle scheduler's cross-check) ------------------------------------

_statements = 0
_count_lock = threading.Lock()


def count_statements() -> None:
    """Count every statement this process sends through a psycopg cursor (sync and async)."""

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
        else:

            def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
                bump()
                return original(self, *args, **kwargs)

            setattr(cls, name, counted)

    for name in ("execute", "executemany"):
        wrap(psycopg.Cursor, name, False)
        wrap(psycopg.AsyncCursor, name, True)


def statements_sent() -> int:
    """Statements counted since :func:`count_statements` was installed."""
    with _count_lock:
        return _statements


# -- the counting proxy (idle statements: pg_stat_statements is not loaded on this server) ---------------

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


class CountingProxy:
    """A TCP proxy in front of the bench server that counts the statements its clients send: every
    simple-protocol ``Query`` ('Q') and every extended-protocol ``Execute`` ('E') message, whatever the
    driver (psycopg, asyncpg). SSL and GSS encryption requests are answered 'N' so the stream stays
    readable. A worker process is pointed at it through ``BENCH_PGPORT``."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._count = 0
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="bench-proxy", daemon=True).start()

    @property
    def statements(self) -> int:
        with self._lock:
            return self._count

    def close(self) -> None:
        self._closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError), client:
            head = _recv_exact(client, 8)
            length, code = struct.unpack("!ii", head)
            while code in (SSL_REQUEST, GSSENC_REQUEST):
                client.sendall(b"N")
                head = _recv_exact(client, 8)
                length, code = struct.unpack("!ii", head)
            startup = head + _recv_exact(client, length - 8)
            with socket.create_connection((PG_HOST, int(PG_PORT))) as server:
                server.sendall(startup)
                threading.Thread(target=_pipe, args=(server, client), daemon=True).start()
                self._client_to_server(client, server)

    def _client_to_server(self, client: socket.socket, server: socket.socket) -> None:
        buffer = b""
        while True:
            chunk = client.recv(65536)
            if not chunk:
                return
            server.sendall(chunk)
            buffer += chunk
            while len(buffer) >= 5:
                kind = buffer[:1]
                (length,) = struct.unpack("!i", buffer[1:5])
                if len(buffer) < 1 + length:
                    break
                buffer = buffer[1 + length :]
                if kind in (b"Q", b"E"):
                    with self._lock:
                        self._count += 1


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


# -- worker processes (parent side) ------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """A worker child, spawned at once. Its stderr goes to ``log_path``; its stdout's first line says it
    is up, and the rest is read and dropped so the pipe never fills."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    proc: subprocess.Popen[str] | None = None
    spawned_at: float = 0.0  # epoch seconds just before the spawn
    _first_line: threading.Event = field(default_factory=threading.Event)

    def spawn(self) -> WorkerProcess:
        log = open(self.log_path, "a") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.spawned_at = time.time()
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._read_stdout, daemon=True).start()
        return self

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for _ in self.proc.stdout:
            self._first_line.set()
        self._first_line.set()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Block until the child printed its first line (it is built and connected)."""
        if not self._first_line.wait(timeout) or not self.alive():
            code = self.proc.poll() if self.proc else None
            tail = self.log_tail()
            self.kill()
            raise RuntimeError(f"worker {self.argv} never came up (exit {code}); its stderr ends:\n{tail}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

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
    """Spawn every worker back to back, yield them, and always stop them."""
    started: list[WorkerProcess] = []
    try:
        for spec in specs:
            started.append(spec.spawn())
        yield started
    finally:
        for worker in started:
            worker.stop()


def check_alive(procs: Sequence[WorkerProcess]) -> Callable[[], None]:
    """A guard for polling loops: raise at once when a worker died instead of waiting out a timeout."""

    def check() -> None:
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"worker {proc.argv} died; its stderr ends:\n{proc.log_tail()}")

    return check


def paced(count: int, interval_s: float) -> Iterator[int]:
    """Yield ``0..count-1``, the i-th no earlier than ``i * interval_s`` after the first (no drift)."""
    start = time.monotonic()
    for i in range(count):
        delay = start + i * interval_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield i
