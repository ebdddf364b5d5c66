"""The machine, the table, and the JSON the bench writes to ``bench/results/<timestamp>.json``."""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import connect
from bench.plan import Plan

LIBRARIES = ("ultimate_jobs", "pgqueuer", "procrastinate")
PEERS = ("pgqueuer", "procrastinate")


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: a figure key, its label, its unit, and which way is better."""

    key: str
    label: str
    unit: str
    higher_is_better: bool


def rows(plan: Plan) -> list[Row]:
    """The table's rows, labelled with this plan's sizes."""
    c = plan.concurrency
    return [
        Row("enqueue_single", f"enqueue, 1 per transaction (N={plan.enqueue_single_n:,})", "jobs/s", True),
        Row(
            "enqueue_batch",
            f"enqueue, batches of {plan.enqueue_batch_size} (N={plan.enqueue_batch_n:,})",
            "jobs/s",
            True,
        ),
        Row(
            "preload_small",
            f"enqueue, batches of {plan.preload_batch:,} into a backlog of {plan.throughput_small_n:,}",
            "jobs/s",
            True,
        ),
        Row(
            "preload_large",
            f"enqueue, batches of {plan.preload_batch:,} into a backlog of {plan.throughput_large_n:,}",
            "jobs/s",
            True,
        ),
        Row("throughput_small_1w", f"drain {plan.throughput_small_n:,} no-op, 1 worker process", "jobs/s", True),
        Row("throughput_small_2w", f"drain {plan.throughput_small_n:,} no-op, 2 worker processes", "jobs/s", True),
        Row("throughput_large_1w", f"drain {plan.throughput_large_n:,} no-op, 1 worker process", "jobs/s", True),
        Row("throughput_large_2w", f"drain {plan.throughput_large_n:,} no-op, 2 worker processes", "jobs/s", True),
        Row("latency_sparse_median", f"pickup latency, 1 per {plan.latency_sparse_interval_s:g}s: median", "ms", False),
        Row("latency_sparse_p95", "pickup latency, sparse: p95", "ms", False),
        Row("latency_sparse_max", "pickup latency, sparse: max", "ms", False),
        Row("latency_stream_median", f"pickup latency, {plan.latency_stream_rate:g} jobs/s: median", "ms", False),
        Row("latency_stream_p95", f"pickup latency, {plan.latency_stream_rate:g} jobs/s: p95", "ms", False),
        Row("latency_stream_max", f"pickup latency, {plan.latency_stream_rate:g} jobs/s: max", "ms", False),
        Row(
            "latency_outbox_median",
            f"pickup latency via outbox, 1 per {plan.latency_sparse_interval_s:g}s: median",
            "ms",
            False,
        ),
        Row("latency_outbox_p95", "pickup latency via outbox: p95", "ms", False),
        Row("latency_outbox_max", "pickup latency via outbox: max", "ms", False),
        Row("idle_statements_per_min", "idle worker: statements per minute", "stmt/min", False),
        Row("idle_xacts_per_min", "idle: bench-db transactions/min (approx.)", "xact/min", False),
        Row(
            "scheduler_idle_statements_per_min",
            "idle scheduler, 35 tasks: statements per minute (executor count)",
            "stmt/min",
            False,
        ),
        Row(
            "claim_filler_small",
            f"drain {plan.claim_n:,} over {plan.filler_small:,} finished rows",
            "jobs/s",
            True,
        ),
        Row(
            "claim_filler_large",
            f"drain {plan.claim_n:,} over {plan.filler_large:,} finished rows",
            "jobs/s",
            True,
        ),
        Row("claim_ratio", "claim cost: large filler / small filler", "ratio", True),
        Row("rss_small_kb", f"worker RSS after {plan.memory_small:,} jobs (c={c})", "MiB", False),
        Row("rss_large_kb", f"worker RSS after {plan.memory_large:,} jobs", "MiB", False),
        Row("rss_ratio", "worker RSS: large / small", "ratio", False),
    ]


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
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if unit == "MiB":
        return f"{value / 1024:,.1f}"
    if unit == "ratio":
        return f"{value:.2f}"
    if unit == "ms":
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def _ratio(ours: float | None, peer: float | None) -> str:
    if ours is None or peer is None or math.isnan(ours) or math.isnan(peer) or peer == 0:
        return "—"
    return f"{ours / peer:.2f}x"


def table(plan: Plan, results: dict[str, dict[str, Any]]) -> str:
    """The measurement table: one row per figure any library produced, medians of ``plan.runs`` runs."""
    figures = {lib: (results.get(lib) or {}).get("figures", {}) for lib in LIBRARIES}
    header = ["measurement", "unit", *LIBRARIES, *(f"ours/{p}" for p in PEERS)]
    lines: list[list[str]] = []
    for row in rows(plan):
        values = [figures[lib].get(row.key) for lib in LIBRARIES]
        if all(v is None for v in values):
            continue
        unit = f"{row.unit} {'↑' if row.higher_is_better else '↓'}"
        lines.append(
            [
                row.label,
                unit,
                *(_fmt(v, row.unit) for v in values),
                *(_ratio(values[0], figures[p].get(row.key)) for p in PEERS),
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
    versions = ", ".join(f"{lib} {r.get('version', '?')}" for lib, r in results.items() if r)
    load = info["load_average_at_start"][0]
    busy = (
        [
            f"WARNING: load average {load} on {info['nproc']} cores at start: other work shares this machine, "
            "so treat these figures as rough"
        ]
        if load >= info["nproc"] / 2
        else []
    )
    return "\n".join(
        [
            *busy,
            f"machine: {info['nproc']} cores, {info['ram_gib']} GiB RAM, PostgreSQL {info['postgres']}, "
            f"Python {info['python']}; load average at start {info['load_average_at_start']}",
            f"plan: {plan.name}, median of {plan.runs} run(s) per figure; {versions}",
        ]
    )


def notes_text(results: dict[str, dict[str, Any]], problems: dict[str, str]) -> str:
    lines = ["↑ higher is better, ↓ lower is better; ours/peer is the plain quotient of the two figures."]
    for lib, result in results.items():
        if result and result.get("idle_method"):
            lines.append(f"idle statements ({lib}): {result['idle_method']}")
    for lib, result in results.items():
        if result and result.get("notes"):
            lines.append(f"{lib}: {result['notes']}")
    lines.extend(f"{lib}: NOT MEASURED — {why}" for lib, why in problems.items())
    return "\n".join(lines)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")


def _json_default(value: Any) -> Any:
    return str(value)
