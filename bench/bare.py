"""The ceiling column: a bare psycopg 3 queue on one small table in its own database, as little as a
Postgres queue can do. Enqueue is one ``INSERT`` per call (autocommit) or one ``INSERT … SELECT unnest``
per batch; a worker process (``python -m bench.bare worker --slots N``) loops: claim 100 queued rows with
``FOR UPDATE SKIP LOCKED`` in one ``UPDATE … RETURNING``, run their no-op bodies, ack the batch in one
``UPDATE``; when nothing is queued it sleeps 10 ms. It has no slots (``--slots`` is ignored), no retries,
no wake-up: only the drain and enqueue rows are measured for it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

import psycopg

from bench.common import announce_ready, connect, conninfo
from bench.procedure import Subject, module_subject, scalar, time_span

DATABASE = "bench_bare"
CLAIM = 100

SQL_SCHEMA = """
create table bare_jobs (
    id bigserial primary key,
    payload jsonb,
    status text not null default 'queued',
    finished_at timestamptz
);
create index bare_jobs_queued on bare_jobs (id) where status = 'queued';
create index bare_jobs_running on bare_jobs (id) where status = 'running';
"""
SQL_CLAIM = """
update bare_jobs set status = 'running'
where id in (select id from bare_jobs where status = 'queued' order by id limit %s for update skip locked)
returning id, payload
"""
SQL_ACK = "update bare_jobs set status = 'done', finished_at = clock_timestamp() where id = any(%s)"


def install() -> None:
    with connect(DATABASE) as conn:
        conn.execute(SQL_SCHEMA)


def enqueue_single(n: int) -> None:
    with connect(DATABASE) as conn:
        for i in range(n):
            conn.execute("insert into bare_jobs (payload) values (%s::jsonb)", (f'{{"n": {i}}}',))


def enqueue_batches(n: int, size: int) -> None:
    with connect(DATABASE) as conn:
        for start in range(0, n, size):
            payloads = [f'{{"n": {i}}}' for i in range(start, min(start + size, n))]
            conn.execute("insert into bare_jobs (payload) select unnest(%s::jsonb[])", (payloads,))


def pending(conn: psycopg.Connection[Any]) -> bool:
    return bool(
        scalar(
            conn,
            "select exists (select 1 from bare_jobs where status = 'queued')"
            " or exists (select 1 from bare_jobs where status = 'running')",
        )
    )


def finished(conn: psycopg.Connection[Any]) -> int:
    return int(scalar(conn, "select count(*) from bare_jobs where status = 'done'"))


def completion_span(conn: psycopg.Connection[Any]) -> tuple[float, float]:
    return time_span(conn, "finished_at", "from bare_jobs where status = 'done'")


def worker_argv(slots: int) -> list[str]:
    return [sys.executable, "-m", "bench.bare", "worker", "--slots", str(slots)]


def subject() -> Subject:
    return module_subject(
        sys.modules[__name__],
        name="bare psycopg",
        version=psycopg.__version__,
        database=DATABASE,
        notes=f"one loop per process: claim {CLAIM} with FOR UPDATE SKIP LOCKED, no-op, ack the batch in one UPDATE",
        cases=("drain", "enqueue"),
    )


def noop(payload: Any) -> None:
    return None


def worker_main() -> None:
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    with psycopg.connect(conninfo(DATABASE), autocommit=True) as conn:
        announce_ready()
        while not stopping:
            rows = conn.execute(SQL_CLAIM, (CLAIM,)).fetchall()
            if not rows:
                time.sleep(0.01)
                continue
            for _, payload in rows:
                noop(payload)
            conn.execute(SQL_ACK, ([r[0] for r in rows],))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bare")
    sub = parser.add_subparsers(dest="command", required=True)
    work = sub.add_parser("worker")
    work.add_argument("--slots", type=int, default=0, help="ignored: the bare loop has no slots")
    parser.parse_args()
    worker_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
