"""The Redis column: ultimate_jobs on its Redis driver against dramatiq and Celery on the same Redis
server, in one run (``python -m bench --cases redis``, part of the full ``make bench``).

Each case of each library runs as ``python -m bench.redis_cases`` — with the project's python for
ultimate_jobs and ``bench/.peers-venv``'s for the peers — on an empty database of ``BENCH_REDIS_URL``
(default ``redis://127.0.0.1:6379/15``; the bench flushes that database and nothing else). Repetitions
interleave as the Postgres cases do; a cell is the median with min-max.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.peers_env import ensure_peers_venv
from bench.plan import Plan
from bench.report import Row, _cell, _ratio, summarize

REDIS_LIBRARIES = ("ultimate_jobs", "dramatiq", "celery")
CASE_TIMEOUT_S = 3 * 3600
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")


def redis_cases(plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    """The cases of one repetition: enqueue, drain (one process, ``plan.slots``), pickup latency."""
    return [
        (
            "enqueue",
            {"n": plan.enqueue_single_n, "batch_n": plan.enqueue_batch_n, "batch_size": plan.enqueue_batch_size},
        ),
        ("drain", {"n": plan.drain_sizes[0], "slots": plan.slots}),
        (
            "latency",
            {
                "n": plan.latency_n,
                "interval_s": plan.latency_interval_s,
                "idle_s": plan.latency_idle_s,
                "slots": plan.slots,
            },
        ),
    ]


def redis_rows(plan: Plan) -> list[Row]:
    n = plan.drain_sizes[0]
    return [
        Row("drain_steady", f"drain {n:,}, 1 proc x {plan.slots} slots, steady", "jobs/s", True),
        Row("drain_from_spawn", f"drain {n:,}, 1 proc x {plan.slots} slots, from spawn", "jobs/s", True),
        Row("enqueue_single", "enqueue, one per call", "jobs/s", True),
        Row("enqueue_batches", f"enqueue, batches of {plan.enqueue_batch_size:,}", "jobs/s", True),
        Row("pickup_p50_ms", "pickup into an idle worker, p50", "ms", False),
        Row("pickup_p95_ms", "pickup into an idle worker, p95", "ms", False),
        Row("pickup_max_ms", "pickup into an idle worker, max", "ms", False),
    ]


def run_case(python: Path, library: str, case: str, params: dict[str, Any], log: Path) -> dict[str, float]:
    argv = [str(python), "-m", "bench.redis_cases", library, case, json.dumps(params), "--log", str(log)]
    env = {**os.environ, "BENCH_REDIS_URL": REDIS_URL, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise RuntimeError(f"{library} {case} failed (exit {done.returncode}):\n{tail}")
    figures: dict[str, float] = json.loads(lines[-1])
    return figures


def run_redis_comparison(
    plan: Plan, log: Path, progress: Callable[[str], None], problems: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Every Redis case for every library, interleaved; answers the results by library."""
    pythons = {"ultimate_jobs": Path(sys.executable)}
    try:
        peers = ensure_peers_venv(progress)
        pythons.update(dramatiq=peers, celery=peers)
    except Exception as exc:  # the peers' columns are then not measured, and say why
        problems["redis peers: bench/.peers-venv"] = str(exc)
    runs: dict[str, dict[str, list[float]]] = {lib: {} for lib in pythons}
    for repetition in range(plan.runs):
        for case, params in redis_cases(plan):
            for lib, python in pythons.items():
                progress(f"redis repetition {repetition + 1}/{plan.runs}: {lib}: {case}")
                try:
                    figures = run_case(python, lib, case, params, log)
                except Exception as exc:
                    problems[f"redis {lib}: {case} (repetition {repetition + 1})"] = str(exc)
                    continue
                for key, value in figures.items():
                    runs[lib].setdefault(key, []).append(float(value))
    return {lib: {"runs": runs[lib], "summary": summarize(runs[lib])} for lib in runs}


def redis_table(plan: Plan, results: dict[str, dict[str, Any]]) -> str:
    """The Redis column as a table of its own: rows are measures, columns the three libraries and the
    ratio of ours to dramatiq."""
    header = ["measurement (Redis, one server)", *REDIS_LIBRARIES, "ours/dramatiq"]
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for row in redis_rows(plan):
        arrow = "↑" if row.higher_is_better else "↓"
        cells = [_cell(results.get(lib, {}).get("summary", {}).get(row.key), row.unit) for lib in REDIS_LIBRARIES]
        ours = results.get("ultimate_jobs", {}).get("summary", {}).get(row.key)
        peer = results.get("dramatiq", {}).get("summary", {}).get(row.key)
        lines.append(" | ".join([f"{row.label} ({row.unit}) {arrow}", *cells, _ratio(ours, peer)]))
    notes = (
        "redis: ultimate_jobs `jobs_worker --quiet --concurrency S` on the Redis driver; dramatiq "
        "`dramatiq … --processes 1 --threads S` on its RedisBroker; Celery `celery worker --pool threads "
        "--concurrency S` with gossip, mingle and heartbeats off and no result backend. Every body runs one "
        "INCR/HSET on the same server; a drain's 'steady' is (N-1) over the first-to-last completion the bench "
        "sees (5 ms poll); dramatiq and Celery have no batched enqueue of their own (—)."
    )
    return "\n".join(lines) + "\n\n" + notes
