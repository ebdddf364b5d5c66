"""The machine, the method, the table, and the JSON the bench writes to ``bench/results/<timestamp>.json``."""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import IO_SLEEP_S, connect, median_of
from bench.plan import RATES_DRIVERS, RATES_PER_S, Plan

LIBRARIES = ("ultimate_jobs", "pgqueuer", "procrastinate", "bare psycopg", "ultimate_jobs sqlite")
LOAD_WARNING = 0.5

METHOD = (
    "method: the checkout's ultimate_jobs and bench modules byte-compiled first, as pip install compiles an "
    "installed package (the peers' packages are). Each library in its own database, freshly created (a copy "
    "of a template holding only its schema) for every measurement. A drain loads its backlog in batches of "
    "{batch:,}, runs VACUUM ANALYZE, "
    "then spawns the worker process(es); 'from spawn' runs from the first spawn until the bench sees nothing "
    "pending (50 ms poll), 'steady' is (N-1) over the first-to-last completion time stamped in the library's "
    "own tables. Enqueue rates include opening the connection. Pickup latency: {lat_n} probes, one every "
    "{lat_ms:g} ms, into one worker idle {idle:g} s, from the enqueue call's return (its commit done) to the "
    "body's start. Idle statements: {window:g} s after {warm:g} s idle, counted by a proxy, per minute. "
    "Cost per job (drains): the worker processes' CPU (user + system, with their children) and the PostgreSQL "
    "server's (every postgres process, and its ended backends) per job over the middle 80% of the completions, "
    "sampled every 100 ms; HOT: the share of the drain's row updates Postgres made heap-only "
    "(pg_stat_user_tables); WAL: bytes the server wrote from the spawn to the end, per job. "
    "I/O-bound drains (io): {io_n:,} jobs whose body waits {sleep_ms:g} ms ('orm': and reads then writes its own "
    "row), one worker process holding {in_flight} async bodies in flight (ours --async-concurrency, pgqueuer "
    "max_concurrent_tasks, Procrastinate concurrency), and ours with a sync body at --concurrency {sync}; RSS is "
    "the worker's peak VmRSS over the middle 80% of the completions (sampled every 100 ms). "
    "Repetitions are interleaved (repetition 1 of every case for every library, then 2, ...); cells are "
    "the median with min-max; ours-only extras (claim, memory, outbox, scheduler, history, backfill, export) run in "
    "repetition 1 only."
)


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: a figure key, its label, its unit, and which way is better."""

    key: str
    label: str
    unit: str
    higher_is_better: bool


def drain_rows(plan: Plan) -> list[Row]:
    out: list[Row] = []
    for config in plan.drain_configs():
        key = f"drain_{config['n']}_{config['processes']}p_{config['slots']}s"
        what = f"drain {config['n']:,}, {config['processes']} proc x {config['slots']} slots"
        out.append(Row(f"{key}_steady", f"{what}, steady", "jobs/s", True))
        out.append(Row(f"{key}_spawn", f"{what}, from spawn", "jobs/s", True))
    return out


def cost_rows(plan: Plan) -> list[Row]:
    """What each job of a drain cost the machine: CPU per job of the worker processes and of the PostgreSQL
    server, the share of row updates Postgres made HOT, and WAL bytes per job."""
    out: list[Row] = []
    for config in plan.drain_configs():
        key = f"drain_{config['n']}_{config['processes']}p_{config['slots']}s"
        what = f"drain {config['n']:,}, {config['processes']} proc x {config['slots']} slots"
        out += [
            Row(f"{key}_worker_cpu_us", f"{what}: worker CPU per job", "us/job", False),
            Row(f"{key}_server_cpu_us", f"{what}: Postgres CPU per job", "us/job", False),
            Row(f"{key}_hot_pct", f"{what}: HOT updates (no index written)", "%", True),
            Row(f"{key}_wal_bytes", f"{what}: WAL per job", "bytes", False),
        ]
    return out


IO_BODIES = {"sleep": "{ms:g} ms await", "orm": "ORM read + {ms:g} ms await + ORM write"}


def io_rows(plan: Plan) -> list[Row]:
    """The io case's rows: per body, the async drain every library runs at ``plan.io_in_flight`` in flight,
    ours with a sync body at each ``--concurrency``, and ours async over ours sync."""
    out: list[Row] = []
    for body in plan.io_bodies:
        what = f"io {plan.io_n:,} x {IO_BODIES[body].format(ms=IO_SLEEP_S * 1000)}"
        flight = f"{plan.io_in_flight} in flight"
        out += [
            Row(f"io_{body}_async_steady", f"{what}: async, {flight}, steady", "jobs/s", True),
            Row(f"io_{body}_async_spawn", f"{what}: async, {flight}, from spawn", "jobs/s", True),
            Row(f"io_{body}_async_rss_kb", f"{what}: async, worker RSS at {flight}", "MiB", False),
            Row(f"io_{body}_async_worker_cpu_us", f"{what}: async, worker CPU per job", "us/job", False),
            Row(f"io_{body}_async_server_cpu_us", f"{what}: async, Postgres CPU per job", "us/job", False),
            Row(f"io_{body}_async_reruns", f"{what}: async, attempts re-run after a failure", "attempts", False),
        ]
        for slots in plan.io_sync_slots:
            sync = f"{what}: ours sync --concurrency {slots}"
            out += [
                Row(f"io_{body}_sync{slots}_steady", f"{sync}, steady", "jobs/s", True),
                Row(f"io_{body}_sync{slots}_rss_kb", f"{sync}, worker RSS", "MiB", False),
                Row(f"io_{body}_sync{slots}_reruns", f"{sync}, attempts re-run after a failure", "attempts", False),
            ]
        out += [
            Row(f"io_{body}_async_over_sync{slots}", f"{what}: ours async / ours sync at {slots}", "ratio", True)
            for slots in plan.io_sync_slots
        ]
    return out


def io_ratios(summary: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Ours async over ours sync per io body and sync slots: the quotient of the two steady medians (one
    figure, no range), added beside the summary's own keys."""
    out: dict[str, dict[str, float]] = {}
    for key, stats in summary.items():
        if not (key.startswith("io_") and "_sync" in key and key.endswith("_steady")):
            continue
        body, variant = key.removeprefix("io_").removesuffix("_steady").rsplit("_", 1)
        async_stats = summary.get(f"io_{body}_async_steady")
        if async_stats is None or not stats["median"]:
            continue
        ratio = async_stats["median"] / stats["median"]
        out[f"io_{body}_async_over_{variant}"] = {"median": ratio, "min": ratio, "max": ratio, "n": 1.0}
    return out


FAIRNESS_RATIOS = {
    "fairness_b_p95_on_over_idle": ("fairness_on_b_p95", "fairness_idle_b_p95"),
    "fairness_a_on_over_off": ("fairness_on_a_steady", "fairness_off_a_steady"),
    "fairness_noop_on_over_off": ("fairness_noop_on_steady", "fairness_noop_off_steady"),
}
"""The fairness case's derived figures: key -> (numerator, denominator), each a figure of another of its parts."""


def fairness_ratios(summary: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The fairness case's quotients: of the two parts' medians (one figure, no range; each part is measured
    apart, so a part that failed leaves its quotients out), added beside the summary's own keys."""
    out: dict[str, dict[str, float]] = {}
    for key, (top, bottom) in FAIRNESS_RATIOS.items():
        if top not in summary or bottom not in summary or not summary[bottom]["median"]:
            continue
        ratio = summary[top]["median"] / summary[bottom]["median"]
        out[key] = {"median": ratio, "min": ratio, "max": ratio, "n": 1.0}
    return out


def fairness_rows(plan: Plan) -> list[Row]:
    """The fairness case's rows: org B's pickup and org A's drain with the queue not fair and fair, B's pickup on
    the idle fair queue, the one-org no-op drain both ways, and the quotients with their goals."""
    modes = (("off", "queue not fair"), ("on", "queue fair"))
    out: list[Row] = []
    for part, what in modes:
        noisy = f"noisy neighbour, {what}: org A {plan.fair_backlog:,} queued"
        pickup = f"org B pickup 1 per {plan.latency_interval_s * 1000:g} ms"
        out += [
            Row(f"fairness_{part}_b_p50", f"{noisy}, {pickup}: p50", "ms", False),
            Row(f"fairness_{part}_b_p95", f"{noisy}, {pickup}: p95", "ms", False),
            Row(f"fairness_{part}_b_probes", f"{noisy}, org B probes sent while A drained", "probes", True),
            Row(f"fairness_{part}_a_steady", f"{noisy}, org A drain, steady", "jobs/s", True),
        ]
    out += [
        Row("fairness_idle_b_p50", "org B pickup, idle fair queue: p50", "ms", False),
        Row("fairness_idle_b_p95", "org B pickup, idle fair queue: p95", "ms", False),
    ]
    out += [
        Row(
            f"fairness_noop_{part}_steady",
            f"drain {plan.claim_n:,} no-op jobs of 1 org, {what}, steady",
            "jobs/s",
            True,
        )
        for part, what in modes
    ]
    return [
        *out,
        Row("fairness_b_p95_on_over_idle", "org B pickup p95: fair / idle (goal ≤ 5)", "ratio", False),
        Row("fairness_a_on_over_off", "org A drain: fair / not fair (goal ≥ 0.9)", "ratio", True),
        Row("fairness_noop_on_over_off", "no-op drain of 1 org: fair / not fair", "ratio", True),
    ]


RATES_LABELS = {"postgres": "Postgres", "sqlite": "SQLite (one file)", "redis": "Redis"}


def rates_rows(plan: Plan) -> list[Row]:
    """The rates case's rows, per driver: the start rate, the hand-backs, the wall time, then the two figures with
    goals — the most starts in any 1 s window and the start rate over the limit."""
    out: list[Row] = []
    for driver in RATES_DRIVERS:
        what = (
            f"rates, {RATES_LABELS[driver]}: {plan.rates_n:,} jobs at {RATES_PER_S}/s on 1 key, "
            f"{plan.rates_processes} proc x {plan.slots} slots"
        )
        key, edge = f"rates_{driver}", RATES_PER_S + 1
        out += [
            Row(f"{key}_rate", f"{what}: start rate, (N-1) / first-to-last start", "starts/s", True),
            Row(f"{key}_handbacks", f"{what}: runs handed back (uncounted)", "hand-backs", False),
            Row(f"{key}_handed_jobs", f"{what}: jobs handed back at least once", "jobs", False),
            Row(f"{key}_wall_s", f"{what}: wall time, first spawn to last finish", "s", False),
            Row(f"{key}_max_window", f"{what}: most starts in any 1 s window (goal ≤ {edge})", "starts", False),
            Row(f"{key}_ratio", f"{what}: start rate / {RATES_PER_S} (goal ≥ 0.95)", "ratio", True),
        ]
    return out


def rows(plan: Plan) -> list[Row]:
    """The table's rows, labelled with this plan's sizes."""
    preload = [
        Row(
            f"drain_{n}_1p_{plan.slots}s_preload",
            f"enqueue, batches of {plan.preload_batch:,} into a backlog of {n:,}",
            "jobs/s",
            True,
        )
        for n in plan.drain_sizes
    ]
    lat = f"1 per {plan.latency_interval_s * 1000:g} ms"
    return [
        *drain_rows(plan),
        *cost_rows(plan),
        Row("enqueue_single", f"enqueue, 1 per transaction (N={plan.enqueue_single_n:,})", "jobs/s", True),
        Row("enqueue_single_async", "enqueue, 1 per transaction (async)", "jobs/s", True),
        Row("enqueue_single_atomic", "enqueue inside atomic(), 1 per transaction (the outbox's stage)", "jobs/s", True),
        Row("enqueue_single_atomic_direct", "enqueue inside atomic(), no outbox (the insert joins it)", "jobs/s", True),
        Row(
            "enqueue_batch",
            f"enqueue, batches of {plan.enqueue_batch_size} (N={plan.enqueue_batch_n:,})",
            "jobs/s",
            True,
        ),
        Row("enqueue_single_cpu_us", "enqueue, 1 per transaction: client CPU per job", "µs", False),
        Row("enqueue_single_async_cpu_us", "enqueue, 1 per transaction (async): client CPU per job", "µs", False),
        Row("enqueue_single_atomic_cpu_us", "enqueue inside atomic(): client CPU per job", "µs", False),
        Row(
            "enqueue_single_atomic_direct_cpu_us", "enqueue inside atomic(), no outbox: client CPU per job", "µs", False
        ),
        Row("enqueue_batch_cpu_us", f"enqueue, batches of {plan.enqueue_batch_size}: client CPU per job", "µs", False),
        *preload,
        Row("latency_p50", f"pickup latency, {lat}: p50", "ms", False),
        Row("latency_p95", "pickup latency: p95", "ms", False),
        Row("latency_max", "pickup latency: max", "ms", False),
        Row("idle_statements_per_min", "idle worker: statements per minute", "stmt/min", False),
        *io_rows(plan),
        Row("outbox_p50", f"pickup latency via outbox, {lat}: p50", "ms", False),
        Row("outbox_p95", "pickup latency via outbox: p95", "ms", False),
        Row("scheduler_idle_statements_per_min", "idle scheduler, 35 tasks: statements/min", "stmt/min", False),
        Row(
            "claim_filler_small", f"drain {plan.claim_n:,}, steady, over {plan.filler_small:,} finished", "jobs/s", True
        ),
        Row(
            "claim_filler_large", f"drain {plan.claim_n:,}, steady, over {plan.filler_large:,} finished", "jobs/s", True
        ),
        Row("claim_ratio", "claim cost: large filler / empty (rate ratio)", "ratio", True),
        Row("rss_small_kb", f"worker RSS after {plan.memory_small:,} jobs", "MiB", False),
        Row("rss_large_kb", f"worker RSS after {plan.memory_large:,} jobs", "MiB", False),
        Row("rss_ratio", "worker RSS: large / small", "ratio", False),
        Row("history_scrape_small_ms", f"/metrics scrape over {plan.filler_small:,} finished rows", "ms", False),
        Row("history_scrape_large_ms", f"/metrics scrape over {plan.filler_large:,} finished rows", "ms", False),
        Row("history_scrape_ratio", "/metrics scrape: large / empty", "ratio", False),
        Row("history_queues_small_ms", f"jobs queues over {plan.filler_small:,} finished rows", "ms", False),
        Row("history_queues_large_ms", f"jobs queues over {plan.filler_large:,} finished rows", "ms", False),
        Row("history_queues_ratio", "jobs queues: large / empty", "ratio", False),
        Row("history_dashboard_small_ms", f"dashboard 7d over {plan.filler_small:,} finished rows", "ms", False),
        Row("history_dashboard_large_ms", f"dashboard 7d over {plan.filler_large:,} finished rows", "ms", False),
        Row("history_dashboard_ratio", "dashboard 7d: large / empty", "ratio", False),
        Row("history_sorted_list_small_ms", f"job list by attempts, counted, {plan.filler_small:,} rows", "ms", False),
        Row("history_sorted_list_large_ms", f"job list by attempts, counted, {plan.filler_large:,} rows", "ms", False),
        Row(
            "backfill_rows_per_s",
            f"backfill of {plan.backfill_rows:,} rows, rate 200, batch 1,000, model instances",
            "rows/s",
            True,
        ),
        Row("backfill_hand_rows_per_s", "hand-written keyset loop in Django, same UPDATE and cap", "rows/s", True),
        Row("backfill_bare_rows_per_s", "the same loop on a bare psycopg connection", "rows/s", True),
        Row("backfill_ratio", "backfill / hand-written loop in Django", "ratio", True),
        Row(
            "backfill_orm_rows_per_s",
            "hand-written keyset loop reading model instances (ORM), same UPDATE and cap",
            "rows/s",
            True,
        ),
        Row("backfill_orm_ratio", "backfill (model instances) / that ORM loop", "ratio", True),
        Row("backfill_pks_rows_per_s", "the same, source values_list('pk', flat=True)", "rows/s", True),
        Row("backfill_pks_ratio", "that backfill / hand-written loop in Django", "ratio", True),
        Row("backfill_rss_early_kb", "worker RSS after 10,000 rows", "MiB", False),
        Row("backfill_rss_end_kb", "worker RSS at the end of the pass", "MiB", False),
        Row("backfill_rss_ratio", "worker RSS: end / after 10,000 rows", "ratio", False),
        Row(
            "export_rows_per_s",
            f"export of {plan.export_rows:,} rows to FileSystemStorage",
            "rows/s",
            True,
        ),
        Row("export_plain_rows_per_s", "plain csv.writer loop over the QuerySet's .iterator()", "rows/s", True),
        Row("export_ratio", "export / plain csv.writer loop", "ratio", True),
        Row("steps_run_steady", f"drain {plan.claim_n:,}: one step.run writing its row (ORM), steady", "jobs/s", True),
        Row("steps_atomic_steady", "the same write as a step.atomic, steady", "jobs/s", True),
        Row("steps_atomic_over_run", "step.atomic / step.run (rate ratio)", "ratio", True),
        *fairness_rows(plan),
        *rates_rows(plan),
    ]


def summarize(runs: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per key: median, min, max and the number of runs."""
    out: dict[str, dict[str, float]] = {}
    for key, values in runs.items():
        finite = [v for v in values if v == v]
        out[key] = {
            "median": median_of(values),
            "min": min(finite) if finite else float("nan"),
            "max": max(finite) if finite else float("nan"),
            "n": float(len(values)),
        }
    out.update(io_ratios(out))
    out.update(fairness_ratios(out))
    return out


def machine() -> dict[str, Any]:
    """nproc, RAM, Postgres, Python, and the load average (other work on the machine skews every figure)."""
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    with connect("postgres") as conn:
        row = conn.execute("show server_version").fetchone()
        pg = str(row[0]) if row else "?"
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "postgres": pg,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _fmt(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "—"
    if unit == "MiB":
        return f"{value / 1024:,.1f}"
    if unit == "ratio":
        return f"{value:.2f}"
    if unit in ("ms", "s", "starts/s"):
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def _cell(stats: dict[str, float] | None, unit: str) -> str:
    if stats is None:
        return "—"
    text = _fmt(stats["median"], unit)
    if stats["n"] > 1:
        text += f" ({_fmt(stats['min'], unit)}-{_fmt(stats['max'], unit)})"
    return text


def _ratio(ours: dict[str, float] | None, peer: dict[str, float] | None) -> str:
    if ours is None or peer is None:
        return "—"
    a, b = ours["median"], peer["median"]
    if math.isnan(a) or math.isnan(b) or b == 0:
        return "—"
    return f"{a / b:.2f}x"


def table(plan: Plan, results: dict[str, dict[str, Any]]) -> str:
    """One row per figure any library produced: median (min-max) over the repetitions."""
    summaries = {lib: (results.get(lib) or {}).get("summary", {}) for lib in LIBRARIES}
    header = ["measure", "unit", *LIBRARIES, "ours/pgqueuer"]
    lines: list[list[str]] = []
    for row in rows(plan):
        stats = [summaries[lib].get(row.key) for lib in LIBRARIES]
        if all(s is None for s in stats):
            continue
        unit = f"{row.unit} {'↑' if row.higher_is_better else '↓'}"
        lines.append(
            [
                row.label,
                unit,
                *(_cell(s, row.unit) for s in stats),
                _ratio(stats[0], summaries["pgqueuer"].get(row.key)),
            ]
        )
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]

    def render(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([render(header), rule, *(render(line) for line in lines)])


def header_text(info: dict[str, Any], plan: Plan, results: dict[str, dict[str, Any]]) -> str:
    versions = ", ".join(f"{lib} {r.get('version', '?')}" for lib, r in results.items())
    load = info["load_average_at_start"][0]
    busy = (
        [
            f"WARNING: load average {load} at start (>= {LOAD_WARNING}): "
            "other work shares this machine, so these figures are rough"
        ]
        if load >= LOAD_WARNING
        else []
    )
    method = METHOD.format(
        batch=plan.preload_batch,
        lat_n=plan.latency_n,
        lat_ms=plan.latency_interval_s * 1000,
        idle=plan.latency_idle_s,
        window=plan.idle_s,
        warm=plan.idle_warmup_s,
        io_n=plan.io_n,
        sleep_ms=IO_SLEEP_S * 1000,
        in_flight=plan.io_in_flight,
        sync=" and ".join(str(s) for s in plan.io_sync_slots),
    )
    return "\n".join(
        [
            *busy,
            f"machine: {info['nproc']} cores, {info['ram_gib']} GiB RAM, PostgreSQL {info['postgres']}, "
            f"Python {info['python']}, {info['platform']}; load average at start {info['load_average_at_start']}",
            f"plan: {plan.name}, {plan.runs} interleaved repetition(s), cases {', '.join(plan.cases)}; {versions}",
            method,
        ]
    )


def notes_text(results: dict[str, dict[str, Any]], problems: dict[str, str]) -> str:
    lines = [
        "↑ higher is better, ↓ lower is better; ours/pgqueuer (and ours/dramatiq) is the plain quotient of the two "
        "medians. '—': the library has no such figure, or it was not measured (see below). "
        "The io rows' goal (issue 26): ours async at least the best peer, and at least 20x ours sync at 10 slots."
    ]
    lines.extend(f"{lib}: {result['notes']}" for lib, result in results.items() if result.get("notes"))
    lines.extend(f"NOT MEASURED — {what}: {why}" for what, why in problems.items())
    return "\n".join(lines)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
