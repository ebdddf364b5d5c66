"""``python -m bench [--quick] [--runs N] [--cases drain,enqueue,...]`` (``make bench``): measure
ultimate_jobs, pgqueuer, Procrastinate and a bare psycopg loop on this machine, in interleaved repetitions,
print the table and write ``bench/results/<timestamp>.json``. See bench/README.md."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import ROOT, compile_checkout
from bench.plan import CASES, EXTRAS, FAIRNESS_PARTS, RATES_DRIVERS, Plan, build_plan, variant_kind
from bench.redis_bench import redis_table, run_redis_comparison
from bench.report import LIBRARIES, header_text, machine, notes_text, summarize, table, write_json

RESULTS = ROOT / "bench" / "results"


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes and one repetition (a smoke run)")
    parser.add_argument("--runs", type=int, help="interleaved repetitions (default: 3, or 1 with --quick)")
    parser.add_argument("--cases", help=f"comma-separated subset of {','.join(CASES)} (default: all)")
    parser.add_argument(
        "--libraries", help=f"comma-separated subset of {','.join(LIBRARIES)} (default: all)", default=None
    )
    return parser.parse_args(argv)


@dataclass
class Library:
    """One column of the table: how to prepare its template database and run one case."""

    name: str
    prepare: Callable[[], None]
    run_case: Callable[[str, dict[str, Any]], dict[str, float]]
    info: dict[str, Any] = field(default_factory=dict)


def ours_library(plan: Plan, log: Path) -> Library:
    from bench import ours

    ours.setup()
    why = ours.driver_available()
    if why is not None:
        raise RuntimeError(f"the postgres driver is not available: {why}")
    return local_library(ours.subject(), ours.prepare_ours, ours.run_case, plan, log)


def takes_part(lib: Library, case: str, params: dict[str, Any]) -> bool:
    """Whether ``lib`` runs this work item: the case is one of its own (and, for io, so is the variant)."""
    if case not in lib.info.get("cases", ()):
        return False
    return case != "io" or variant_kind(params["variant"]) in lib.info.get("io_variants", ())


def sqlite_library(plan: Plan, log: Path) -> Library:
    """ultimate_jobs on the SQLite driver: one file, one worker process (bench/sqlite.py)."""
    from bench import ours, sqlite

    ours.setup()
    return Library(
        name=sqlite.NAME,
        prepare=sqlite.prepare,
        run_case=lambda case, params: sqlite.run_case(case, params, plan, log),
        info=sqlite.info(),
    )


def bare_library(plan: Plan, log: Path) -> Library:
    from bench import bare, procedure

    return local_library(bare.subject(), procedure.prepare, procedure.run_case, plan, log)


def local_library(sub: Any, prepare: Callable[[Any], None], run: Callable[..., Any], plan: Plan, log: Path) -> Library:
    """A library measured in this process (ours, the bare loop) over its subject."""
    return Library(
        name=sub.name,
        prepare=lambda: prepare(sub),
        run_case=lambda case, params: run(sub, case, params, plan, log),
        info={
            "version": sub.version,
            "notes": sub.notes,
            "cases": list(sub.cases),
            "io_variants": list(sub.io.variants) if sub.io else [],
        },
    )


def peer_library(name: str, python: Path, plan: Plan, log: Path) -> Library:
    from bench.peers_env import run_peer

    def run_case(case: str, params: dict[str, Any]) -> dict[str, float]:
        args = ["case", case, "--params", json.dumps(params), "--plan", plan.as_json(), "--log", str(log)]
        return run_peer(python, name, *args)

    def prepare() -> None:
        run_peer(python, name, "prepare")

    return Library(
        name=name,
        prepare=prepare,
        run_case=run_case,
        info=run_peer(python, name, "info"),
    )


def build_libraries(plan: Plan, log: Path, wanted: list[str], problems: dict[str, str]) -> list[Library]:
    libraries: list[Library] = []
    python: Path | None = None
    for name in wanted:
        try:
            if name == "ultimate_jobs":
                lib = ours_library(plan, log)
            elif name == "bare psycopg":
                lib = bare_library(plan, log)
            elif name == "ultimate_jobs sqlite":
                lib = sqlite_library(plan, log)
            else:
                if python is None:
                    from bench.peers_env import ensure_peers_venv

                    python = ensure_peers_venv(progress)
                lib = peer_library(name, python, plan, log)
            progress(f"{name}: creating its template database")
            lib.prepare()
        except Exception as exc:
            problems[name] = f"could not be set up: {exc}"
            continue
        libraries.append(lib)
    return libraries


def work_items(plan: Plan, repetition: int) -> list[tuple[str, dict[str, Any]]]:
    """The cases of one repetition in order; the ours-only extras only in the first."""
    items: list[tuple[str, dict[str, Any]]] = []
    for case in plan.cases:
        if case in EXTRAS and repetition > 0:
            continue
        if case == "drain":
            items.extend(("drain", dict(config)) for config in plan.drain_configs())
        elif case == "io":
            items.extend(("io", dict(config)) for config in plan.io_configs())
        elif case == "fairness":
            items.extend(("fairness", {"part": part}) for part in FAIRNESS_PARTS)
        elif case == "rates":
            items.extend(("rates", {"driver": driver}) for driver in RATES_DRIVERS)
        else:
            items.append((case, {}))
    return items


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cases = tuple(c.strip() for c in args.cases.split(",") if c.strip()) if args.cases else None
    plan = build_plan(quick=args.quick, runs=args.runs, cases=cases)
    wanted = [s.strip() for s in args.libraries.split(",")] if args.libraries else list(LIBRARIES)
    unknown = [w for w in wanted if w not in LIBRARIES]
    if unknown:
        raise SystemExit(f"unknown libraries {unknown}; choose from {', '.join(LIBRARIES)}")
    started = datetime.now(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / f"{stamp}.workers.log"
    info = machine()
    compile_checkout()
    progress(f"plan {plan.name}: {plan.runs} interleaved repetition(s); worker stderr goes to {log.relative_to(ROOT)}")
    problems: dict[str, str] = {}
    postgres_cases = [c for c in plan.cases if c != "redis"]
    # the Postgres libraries' databases are (re)created only when a Postgres case runs
    libraries = build_libraries(plan, log, wanted, problems) if postgres_cases else []
    runs: dict[str, dict[str, list[float]]] = {lib.name: {} for lib in libraries}
    for repetition in range(plan.runs):
        for case, params in work_items(plan, repetition):
            for lib in libraries:
                if not takes_part(lib, case, params):
                    continue
                label = f"{case} {params}" if params else case
                progress(f"repetition {repetition + 1}/{plan.runs}: {lib.name}: {label}")
                try:
                    figures = lib.run_case(case, params)
                except Exception as exc:
                    problems[f"{lib.name}: {label} (repetition {repetition + 1})"] = str(exc)
                    continue
                for key, value in figures.items():
                    runs[lib.name].setdefault(key, []).append(float(value))
    redis_results = run_redis_comparison(plan, log, progress, problems) if "redis" in plan.cases else {}
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results = {
        lib.name: {**lib.info, "runs": runs[lib.name], "summary": summarize(runs[lib.name])} for lib in libraries
    }
    parts = [header_text(info, plan, results), *([table(plan, results)] if libraries else [])]
    if redis_results:
        parts.append(redis_table(plan, redis_results))
    text = "\n\n".join([*parts, notes_text(results, problems)])
    print(text)
    out = RESULTS / f"{stamp}.json"
    write_json(
        out,
        {
            "started_at": started.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(),
            "machine": info,
            "plan": json.loads(plan.as_json()),
            "results": results,
            "redis": redis_results,
            "problems": problems,
            "table": text,
        },
    )
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
