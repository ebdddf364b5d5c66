"""``python -m bench.scheduler_idle``: statements per idle minute of one scheduler leading 35 tasks with
nothing due (the spec's figure: 6, for any number of tasks).

The scheduler is built exactly as ``manage.py jobs_scheduler`` builds it (``scheduler_from_settings``:
the Postgres lease leader and stored watermarks on the driver's own database, a 1 s tick, a 30 s
lease renewed every 10 s) except that its executor is wrapped to count every statement it sends.
That count is the figure: ``pg_stat_statements`` needs ``shared_preload_libraries``, which the local
server does not set, and the wrapper sees exactly the scheduler's own statements. Every statement the
process sends through a psycopg cursor is counted too, as a cross-check (it also sees Django's
connection set-up); ``pg_stat_statements`` is read as well when the server has it.

Runs in its own process (``bench.ours`` spawns it for the table): the window is wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

METHOD = "counted by wrapping the scheduler's executor (pg_stat_statements unavailable or not used)"
TASKS = 35
NOTHING_DUE_CRON = "0 3 29 2 *"  # 29 February, 03:00 UTC: nothing falls due inside any window


class CountingExecutor:
    """The driver's executor, counting every statement sent through it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.alias, self.statements = inner, inner.alias, 0

    def query(self, sql: str, params: Any = None, *, binding: str = "django") -> list[tuple[Any, ...]]:
        self.statements += 1
        return self.inner.query(sql, params, binding=binding)  # type: ignore[no-any-return]


def _pss_calls(database: str) -> int:
    from bench.common import connect

    with connect(database) as conn:
        row = conn.execute(
            "select coalesce(sum(calls), 0) from pg_stat_statements s join pg_database d on d.oid = s.dbid "
            "where d.datname = %s",
            (database,),
        ).fetchone()
    return int(row[0]) if row else 0


def pg_stat_statements_usable(database: str) -> bool:
    """Whether ``pg_stat_statements`` can be created AND read (it needs ``shared_preload_libraries``).
    A failed attempt is rolled back, so the extension is not left behind half-usable."""
    import psycopg

    from bench.common import connect

    with connect(database) as conn:
        try:
            with conn.transaction():
                conn.execute("create extension if not exists pg_stat_statements")
                conn.execute("select count(*) from pg_stat_statements")
        except psycopg.Error:
            return False
    return True


def measure(*, window_s: float, warmup_s: float, tasks: int = TASKS) -> dict[str, Any]:
    """Build the scheduler over ``tasks`` idle tasks, let it lead for ``warmup_s``, then count ``window_s``."""
    from bench import ours
    from bench.common import count_statements, statements_sent

    ours.setup()
    use_pss = pg_stat_statements_usable(ours.DATABASE)
    count_statements()

    from bench.jobs import bench_noop
    from ultimate_jobs import job_scheduler, lease_leader, task
    from ultimate_jobs.conf import jobs_settings
    from ultimate_jobs.core.installed import job_clock
    from ultimate_jobs.drivers.postgres.driver import PostgresDriver
    from ultimate_jobs.drivers.postgres.executor import django_executor
    from ultimate_jobs.scheduler.boot import scheduler_from_settings

    def entries(occurrence_ms: int) -> list[tuple[Any, Any]]:
        return [(bench_noop, {"n": f"idle-task:{occurrence_ms}"})]

    declared = [task(cron=NOTHING_DUE_CRON, tz="UTC", name=f"bench_idle_{i:02d}")(entries) for i in range(tasks)]
    reference = scheduler_from_settings()  # what jobs_scheduler runs; rebuilt below over a counting executor
    executor = CountingExecutor(django_executor(jobs_settings().database))
    driver = PostgresDriver(clock=job_clock(), executor=executor)  # the configured driver, its statements counted
    scheduler = job_scheduler(
        driver=driver,
        leader=lease_leader(driver, ttl=reference.leader.ttl_ms),
        tasks=declared,
        tick_interval=reference.tick_interval_ms,
    )
    scheduler.check_durable()
    scheduler.start()
    try:
        time.sleep(warmup_s)
        if not scheduler.leading:
            raise RuntimeError("the scheduler did not take the lease during the warm-up")
        pss_before = _pss_calls(ours.DATABASE) if use_pss else None
        before = (executor.statements, statements_sent(), scheduler.stats.rounds)
        time.sleep(window_s)
        after = (executor.statements, statements_sent(), scheduler.stats.rounds)
        pss_after = _pss_calls(ours.DATABASE) if use_pss else None
    finally:
        scheduler.stop()
    scale = 60.0 / window_s
    pss = None if pss_before is None or pss_after is None else (pss_after - pss_before) * scale
    return {
        "tasks": tasks,
        "window_s": window_s,
        "rounds": after[2] - before[2],
        "fires": scheduler.stats.fires,
        "statements_per_min": (after[0] - before[0]) * scale,
        "psycopg_statements_per_min": (after[1] - before[1]) * scale,
        "pg_stat_statements_per_min": pss,
        "lease_ttl_ms": scheduler.leader.ttl_ms,
        "renew_every_ms": scheduler.leader.renew_every_ms,
        "method": METHOD,
    }


def measure_in_child(window_s: float, warmup_s: float, log: Path | None = None) -> dict[str, Any]:
    """Run :func:`measure` in a fresh process (the bench process's own traffic stays out of the count)."""
    root = Path(__file__).resolve().parent.parent
    argv = [sys.executable, "-m", "bench.scheduler_idle", "--seconds", str(window_s), "--warmup", str(warmup_s)]
    stderr = log.open("a") if log is not None else subprocess.DEVNULL
    try:
        done = subprocess.run(
            [*argv, "--json"],
            cwd=root,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            check=True,
            timeout=window_s + warmup_s + 120,
        )
    finally:
        if log is not None:
            stderr.close()  # type: ignore[union-attr]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler_idle", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="the counted window (default 60 s)")
    parser.add_argument("--warmup", type=float, default=5.0, help="leading before the window opens (default 5 s)")
    parser.add_argument("--tasks", type=int, default=TASKS, help=f"idle tasks (default {TASKS})")
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    if not args.json:  # run alone: a fresh, migrated bench database (the bench itself provides one)
        from bench import ours

        ours.setup()
        ours.prepare_ours(ours.subject())
    result = measure(window_s=args.seconds, warmup_s=args.warmup, tasks=args.tasks)
    if args.json:
        print(json.dumps(result), flush=True)
        return 0
    pss = result["pg_stat_statements_per_min"]
    print(
        "\n".join(
            [
                f"idle scheduler: {result['tasks']} tasks, nothing due, {result['window_s']:g} s window "
                f"({result['rounds']} rounds), lease TTL {result['lease_ttl_ms']} ms renewed every "
                f"{result['renew_every_ms']} ms",
                f"  statements per idle minute: {result['statements_per_min']:.1f}  — {result['method']}",
                f"  cross-check, every psycopg cursor statement of the process: "
                f"{result['psycopg_statements_per_min']:.1f} per minute",
                "  pg_stat_statements: "
                + ("not available on this server (needs shared_preload_libraries)" if pss is None else f"{pss:.1f}"),
                f"  fires during the run: {result['fires']}",
            ]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
