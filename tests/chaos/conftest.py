"""Fixtures of the chaos suite: its size, a private Postgres cluster migrated for it, and the child
processes that run against that cluster. The figures a run printed are repeated in pytest's terminal
summary, so ``make test`` shows them without ``-s``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.chaos.cluster import Cluster, find_bin_dir
from tests.e2e.test_postgres_processes import REPO
from tests.helpers import Child

DATABASE = "chaos"
MIGRATE_S = 300
FIGURES: list[str] = []  # the tables the run(s) of this session printed


@dataclass(frozen=True)
class Size:
    """How much chaos one run makes: ``CHAOS_SIZE=short`` (the default, in ``make test``) or ``full``
    (``make chaos``)."""

    name: str
    jobs: int  # three-step jobs
    workers: int  # worker processes alive at a time
    concurrency: int  # slots per worker
    kills: int  # worker SIGKILLs, each followed by a replacement
    orders: int  # orders placed through the outbox, every other one rolled back
    relay_kills: int  # relay SIGKILLs, each followed by a replacement
    deadline_s: float  # the bound on the whole run, far above what it takes


SIZES = {
    "short": Size("short", jobs=4_000, workers=3, concurrency=4, kills=12, orders=400, relay_kills=6, deadline_s=150),
    "full": Size("full", jobs=10_000, workers=4, concurrency=8, kills=33, orders=2_000, relay_kills=20, deadline_s=900),
}


@pytest.fixture(scope="session")
def size() -> Size:
    name = os.environ.get("CHAOS_SIZE", "short")
    if name not in SIZES:
        raise pytest.UsageError(f"CHAOS_SIZE={name!r}; use one of {sorted(SIZES)}")
    return SIZES[name]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A private cluster, started, with database ``chaos`` migrated; stopped and its directory removed
    at teardown, whatever happened."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.fail(  # the chaos run is part of the suite: a machine without the binaries cannot pass it
            "no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin; install the server "
            "package or point UJ_CHAOS_PG_BIN at its bin directory"
        )
    pg = Cluster(bin_dir)
    try:
        pg.init()
        pg.start()
        pg.create_database(DATABASE)
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=REPO,
            env=child_env(pg, vt="30s"),
            capture_output=True,
            text=True,
            timeout=MIGRATE_S,
            check=False,
        )
        assert migrate.returncode == 0, f"migrate on the private cluster failed:\n{migrate.stdout}\n{migrate.stderr}"
        yield pg
    finally:
        try:
            pg.stop()
        finally:
            pg.remove()


def child_env(pg: Cluster, *, vt: str) -> dict[str, str]:
    """The environment of a process on the private cluster: the chaos settings, its host and port."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "tests.chaos.settings",
        "ULTIMATE_JOBS_TEST_DB": DATABASE,
        "UJ_CHAOS_PGHOST": pg.host,
        "UJ_CHAOS_PGPORT": str(pg.port),
        "UJ_VT": vt,
    }


Start = Callable[..., Child]


@pytest.fixture
def start(cluster: Cluster) -> Iterator[Start]:
    """``start(name, *args, vt=...)``: a Python child on the private cluster; every child still alive at
    teardown is SIGKILLed before the cluster stops."""
    children: list[Child] = []

    def spawn(name: str, *args: str, vt: str) -> Child:
        child = Child(name, [sys.executable, *args], child_env(cluster, vt=vt))
        children.append(child)
        return child

    try:
        yield spawn
    finally:
        for child in children:
            child.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("chaos figures")
        for table in FIGURES:
            terminalreporter.write_line(table)
