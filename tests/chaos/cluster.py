"""A PostgreSQL cluster of the chaos suite's own: a fresh data directory in a temporary folder, a free
port, trust auth, its server started and stopped with ``pg_ctl`` — as the ``postgres`` OS user when
the suite runs as root, as Postgres refuses to run as root. The shared server is never touched: the
suite's processes reach this cluster only (:mod:`tests.chaos.settings`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"  # Debian's layout; UJ_CHAOS_PG_BIN names another bin directory
CTL_TIMEOUT_S = 60
# A process crash loses nothing the kernel holds, so fsync buys nothing for `pg_ctl restart -m immediate`.
SERVER_OPTIONS = "-c fsync=off -c full_page_writes=off -c shared_buffers=64MB -c max_connections=200"


def _version(bin_dir: str) -> int:
    name = Path(bin_dir).parent.name
    return int(name) if name.isdigit() else -1


def find_bin_dir() -> Path | None:
    """``UJ_CHAOS_PG_BIN``, else the newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb``."""
    named = os.environ.get("UJ_CHAOS_PG_BIN")
    candidates = [named] if named else sorted(glob.glob(PG_BIN_GLOB), key=_version)
    found = [Path(c) for c in candidates if (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists()]
    return found[-1] if found else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """One private cluster under ``root``: ``data/``, ``server.log`` and the Unix socket."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.as_postgres = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="uj-chaos-pg-"))
        if self.as_postgres:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.host = "127.0.0.1"
        self.port = free_port()

    def _tool(self, name: str, *args: str) -> None:
        command = [str(self.bin_dir / name), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=CTL_TIMEOUT_S + 30, check=False)
        if done.returncode:
            raise RuntimeError(f"{name} {' '.join(args)} exited {done.returncode}: {done.stderr}\n{self.log_tail()}")

    def _ctl(self, *args: str) -> None:
        self._tool("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(CTL_TIMEOUT_S), *args)

    def init(self) -> None:
        self._tool("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses={self.host} {SERVER_OPTIONS}"
        self._ctl("-o", options, "start")

    def crash(self) -> None:
        """``pg_ctl restart -m immediate``: the postmaster and every backend die without a checkpoint; the
        server comes back through crash recovery (WAL replay) on the same port."""
        self._ctl("-m", "immediate", "restart")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._ctl("-m", "immediate", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def connect(self, dbname: str = "postgres", **options: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.host, port=self.port, user="postgres", dbname=dbname, autocommit=True, **options
        )

    def create_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
