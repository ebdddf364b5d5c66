"""The rates case (ours only): ``@job(rate_limit=...)`` held to 50 starts a second on one key across three worker
processes, on each driver — Postgres, SQLite (its one file) and Redis — as one work item each.

Each measurement: a fresh store (the Postgres database copied from its template; the SQLite file copied from its
template, migrated once per bench run; ``FLUSHDB`` of ``BENCH_REDIS_URL``'s database), ``plan.rates_n`` jobs of
``bench_rate_noop`` (bench/rate_jobs.py) queued up front by ``python -m bench.rate_client load`` in batches of
``plan.preload_batch``, then ``plan.rates_processes`` worker processes spawned back to back, each ``manage.py
jobs_worker --quiet --concurrency S --queues bench_rates`` under the driver's rates settings, and ``python -m
bench.rate_client report`` waiting for the queue to hold no live row and reading the jobs and the stamped starts
back. The figures are computed here from what it answers and from the hand-back log the workers wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT, SQLITE_FILE, WorkerProcess, check_alive, fresh_database, workers
from bench.plan import RATES_PER_S, Plan
from bench.procedure import Figures

RATES_QUEUE = "bench_rates"  # bench/rate_jobs.py's (not imported here: see bench/rate_client.py)
HANDBACKS_ENV = "BENCH_RATES_HANDBACKS"  # bench/settings_rates.py's
HANDBACK_EVENT = "jobs.job.rate-limited"
RATES_DIR = ROOT / "bench" / "results" / "rates"
WINDOW_S = 1.0
POLL_S = 0.1
GRACE_S = 120.0  # beyond twice the schedule's own length (rates_n / RATES_PER_S)


@dataclass(frozen=True)
class Store:
    """One driver of the case: its label, its rates settings, how its store is made fresh, its workers' extra env."""

    label: str
    settings: str
    fresh: Callable[[], None]
    env: dict[str, str] = field(default_factory=dict)


def _fresh_postgres() -> None:
    from bench.ours import DATABASE, close_connections

    close_connections()
    fresh_database(DATABASE)


_sqlite_template_made = False


def _fresh_sqlite() -> None:
    """The SQLite column's file anew; its template is migrated the first time in a bench run (the SQLite column
    makes it too when it takes part, as ``prepare``)."""
    global _sqlite_template_made
    from bench import sqlite

    if not _sqlite_template_made:
        sqlite.prepare()
        _sqlite_template_made = True
    sqlite.fresh()


def _fresh_redis() -> None:
    import redis

    from bench.redis_bench import REDIS_URL

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.flushdb()
    finally:
        client.close()


def _redis_env() -> dict[str, str]:
    from bench.redis_bench import REDIS_URL

    return {"BENCH_REDIS_URL": REDIS_URL}


def stores() -> dict[str, Store]:
    return {
        "postgres": Store("Postgres", "bench.settings_rates", _fresh_postgres),
        "sqlite": Store(
            "SQLite", "bench.settings_rates_sqlite", _fresh_sqlite, {"BENCH_SQLITE_FILE": str(SQLITE_FILE)}
        ),
        "redis": Store("Redis", "bench.settings_rates_redis", _fresh_redis, _redis_env()),
    }


def client_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench.rate_client", *args]


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _last_json(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError("no JSON line")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def max_in_window(times: list[float], window_s: float = WINDOW_S) -> int:
    """The most instants of ``times`` (sorted) in any window ``[t, t + window_s]`` — both ends included — that
    starts at one of them: every start is tried as a window's start."""
    best, j = 0, 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] <= start + window_s:
            j += 1
        best = max(best, j - i)
    return best


def handbacks(path: Path) -> tuple[int, int]:
    """``(hand-backs, jobs handed back at least once)``: the ``jobs.job.rate-limited`` lines the workers wrote."""
    if not path.exists():
        return 0, 0
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records = [r for r in records if r.get("event") == HANDBACK_EVENT]
    return len(records), len({r.get("job_id") for r in records})


def case_rates(plan: Plan, driver: str, log: Path) -> Figures:
    """One driver's measurement (the module's docstring); ``RuntimeError`` with the reason when it fails: a job
    not done, an attempts count other than 1, a job whose body did not stamp exactly one start."""
    store = stores()[driver]
    n = plan.rates_n
    key = f"rates_{driver}"
    store.fresh()
    RATES_DIR.mkdir(parents=True, exist_ok=True)
    handback_log = RATES_DIR / f"handbacks-{driver}.jsonl"
    handback_log.unlink(missing_ok=True)
    env = {"DJANGO_SETTINGS_MODULE": store.settings, HANDBACKS_ENV: str(handback_log), **store.env}
    full_env = {**os.environ, **env}
    loaded = subprocess.run(
        client_argv("load", str(n), str(plan.preload_batch)),
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
    )
    if loaded.returncode != 0:
        raise RuntimeError(f"rates on {store.label}: loading the jobs failed: {_tail(loaded.stderr)}")
    argv = [
        sys.executable, "manage.py", "jobs_worker", "--quiet", "--concurrency", str(plan.slots),
        "--queues", RATES_QUEUE,
    ]  # fmt: skip
    specs = [WorkerProcess(argv=argv, env=env, log_path=log) for _ in range(plan.rates_processes)]
    timeout_s = 2 * n / RATES_PER_S + GRACE_S
    with workers(specs) as procs:
        spawned = procs[0].spawned_at
        reporter = subprocess.Popen(
            client_argv("report", str(timeout_s)),
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            alive = check_alive(procs)
            while reporter.poll() is None:
                alive()
                time.sleep(POLL_S)
            out, err = reporter.communicate()
        finally:
            if reporter.poll() is None:
                reporter.kill()
                reporter.communicate()
    if reporter.returncode != 0:
        raise RuntimeError(f"rates on {store.label}: reading the jobs back failed: {_tail(err)}")
    try:
        answer = _last_json(out)
    except ValueError:
        raise RuntimeError(f"rates on {store.label}: the reader answered nothing: {_tail(err)}") from None
    jobs, states, attempts = answer["jobs"], answer["states"], answer["attempts"]
    if jobs != n or states != {"done": n}:
        why = "" if answer["drained"] else f" after {timeout_s:.0f} s"
        raise RuntimeError(f"rates on {store.label}: {jobs:,} of {n:,} jobs found{why}, by state {states}")
    if attempts != {"1": n}:
        raise RuntimeError(
            f"rates on {store.label}: attempts counts {attempts} (every job must show 1: a run handed back spends "
            "no attempt)"
        )
    stamped = sorted(int(s[0]) for s in answer["starts"])
    if stamped != list(range(n)):
        raise RuntimeError(
            f"rates on {store.label}: the bodies stamped {len(stamped):,} starts of {len(set(stamped)):,} distinct "
            f"jobs for {n:,} jobs (each must start once)"
        )
    times = sorted(float(s[1]) for s in answer["starts"])
    rate = (n - 1) / (times[-1] - times[0])
    handed, handed_jobs = handbacks(handback_log)
    return {
        f"{key}_max_window": float(max_in_window(times)),
        f"{key}_rate": rate,
        f"{key}_ratio": rate / RATES_PER_S,
        f"{key}_handbacks": float(handed),
        f"{key}_handed_jobs": float(handed_jobs),
        f"{key}_wall_s": answer["finished_last_ms"] / 1000.0 - spawned,
    }
