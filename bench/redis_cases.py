"""The Redis comparison's cases, one procedure for ultimate_jobs, dramatiq and Celery on the same Redis.

``python -m bench.redis_cases <library> <case> '<json params>'`` runs one case and prints one JSON line;
the bench runs it with the project's python for ultimate_jobs and with ``bench/.peers-venv``'s for the
peers. Each case starts on an empty database (``FLUSHDB`` of ``BENCH_REDIS_URL``), and every job body
does the same thing in every library: the no-op counts itself (``INCR bench:done``), the probe stamps
its start (``HSET bench:lat <n> <time>``). Standard library and redis-py only at import.
"""

from __future__ import annotations

import abc
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
DONE, LAT = "bench:done", "bench:lat"
POLL_S = 0.005
TIMEOUT_S = 3_600.0

_client: redis.Redis | None = None


def client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(REDIS_URL)
    return _client


def mark_done() -> None:
    """The no-op body's one effect."""
    client().incr(DONE)


def mark_probe(n: int) -> None:
    """The probe body's one effect: when it started."""
    client().hset(LAT, str(n), repr(time.time()))


# -- the three libraries ---------------------------------------------------------------------------------


class Library(abc.ABC):
    """How one library enqueues and runs a worker process with ``slots`` slots."""

    name = ""

    @abc.abstractmethod
    def worker_argv(self, slots: int) -> list[str]:
        """The worker process's command line."""

    @abc.abstractmethod
    def noop(self, n: int) -> None:
        """Enqueue the no-op job ``n``."""

    @abc.abstractmethod
    def probe(self, n: int) -> None:
        """Enqueue the latency probe ``n``."""

    def noop_batch(self, ns: range) -> None:
        for n in ns:
            self.noop(n)


class Ours(Library):
    name = "ultimate_jobs"

    def __init__(self) -> None:
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.redis_settings"  # its worker processes inherit it
        import django

        django.setup()
        from bench import redis_jobs

        self.jobs = redis_jobs

    def worker_argv(self, slots: int) -> list[str]:
        queue = self.jobs.QUEUE
        return [sys.executable, "manage.py", "jobs_worker", "--quiet", "--queues", queue, "--concurrency", str(slots)]

    def noop(self, n: int) -> None:
        self.jobs.bench_redis_noop.enqueue({"n": n})

    def probe(self, n: int) -> None:
        self.jobs.bench_redis_probe.enqueue({"n": n})

    def noop_batch(self, ns: range) -> None:
        self.jobs.bench_redis_noop.enqueue_many([{"n": n} for n in ns])


class Dramatiq(Library):
    name = "dramatiq"

    def __init__(self) -> None:
        from bench.peers import dramatiq_app

        self.app = dramatiq_app

    def worker_argv(self, slots: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "dramatiq",
            "bench.peers.dramatiq_app",
            "--processes",
            "1",
            "--threads",
            str(slots),
        ]

    def noop(self, n: int) -> None:
        self.app.noop.send(n)

    def probe(self, n: int) -> None:
        self.app.probe.send(n)


class Celery(Library):
    name = "celery"

    def __init__(self) -> None:
        from bench.peers import celery_app

        self.app = celery_app

    def worker_argv(self, slots: int) -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", "bench.peers.celery_app", "worker", "--pool", "threads",
            "--concurrency", str(slots), "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", "WARNING",
        ]  # fmt: skip

    def noop(self, n: int) -> None:
        self.app.noop.delay(n)

    def probe(self, n: int) -> None:
        self.app.probe.delay(n)


LIBRARIES: dict[str, Callable[[], Library]] = {"ultimate_jobs": Ours, "dramatiq": Dramatiq, "celery": Celery}


# -- the procedure ---------------------------------------------------------------------------------------


def spawn(lib: Library, slots: int, log: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BENCH_REDIS_URL": REDIS_URL, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(lib.worker_argv(slots), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def done_count() -> int:
    return int(client().get(DONE) or 0)


def wait_for(check: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def case_enqueue(lib: Library, n: int, batch_n: int, batch_size: int) -> dict[str, float]:
    client().flushdb()
    started = time.perf_counter()
    for i in range(n):
        lib.noop(i)
    single = n / (time.perf_counter() - started)
    figures = {"enqueue_single": single}
    if isinstance(lib, Ours):  # the peers have no batched enqueue of their own
        client().flushdb()
        started = time.perf_counter()
        for start in range(0, batch_n, batch_size):
            lib.noop_batch(range(start, min(start + batch_size, batch_n)))
        figures["enqueue_batches"] = batch_n / (time.perf_counter() - started)
    return figures


def case_drain(lib: Library, n: int, slots: int, log: Any) -> dict[str, float]:
    client().flushdb()
    for start in range(0, n, 1_000):
        lib.noop_batch(range(start, min(start + 1_000, n)))
    spawned = time.monotonic()
    proc = spawn(lib, slots, log)
    try:
        wait_for(lambda: done_count() >= 1, proc, "the first completion")
        first = time.monotonic()
        wait_for(lambda: done_count() >= n, proc, f"{n} completions")
        last = time.monotonic()
    finally:
        stop(proc)
    if done_count() != n:
        raise RuntimeError(f"{done_count()} completions for {n} jobs")
    return {"drain_steady": (n - 1) / max(last - first, 1e-9), "drain_from_spawn": n / (last - spawned)}


def case_latency(lib: Library, n: int, interval_s: float, idle_s: float, slots: int, log: Any) -> dict[str, float]:
    client().flushdb()
    proc = spawn(lib, slots, log)
    try:
        lib.noop(-1)  # the worker is up once it ran this
        wait_for(lambda: done_count() >= 1, proc, "the warm-up job")
        time.sleep(idle_s)
        sent: dict[int, float] = {}
        for i in range(n):
            lib.probe(i)
            sent[i] = time.time()
            time.sleep(interval_s)
        wait_for(lambda: client().hlen(LAT) >= n, proc, f"{n} probes")
        starts = {int(k): float(v) for k, v in client().hgetall(LAT).items()}
    finally:
        stop(proc)
    latencies = sorted((starts[i] - sent[i]) * 1000 for i in range(n))
    return {
        "pickup_p50_ms": latencies[len(latencies) // 2],
        "pickup_p95_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))],
        "pickup_max_ms": latencies[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("library", choices=sorted(LIBRARIES))
    parser.add_argument("case", choices=["enqueue", "drain", "latency"])
    parser.add_argument("params", help="the case's parameters as JSON")
    parser.add_argument("--log", default=os.devnull, help="where the worker's stderr goes")
    args = parser.parse_args(argv)
    params = json.loads(args.params)
    lib = LIBRARIES[args.library]()
    with open(args.log, "ab") as log:
        if args.case == "enqueue":
            figures = case_enqueue(lib, params["n"], params["batch_n"], params["batch_size"])
        elif args.case == "drain":
            figures = case_drain(lib, params["n"], params["slots"], log)
        else:
            figures = case_latency(lib, params["n"], params["interval_s"], params["idle_s"], params["slots"], log)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
