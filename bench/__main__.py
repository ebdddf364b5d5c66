"""``python -m bench [--quick]`` (``make bench``): measure ultimate_jobs, pgqueuer and Procrastinate on this
machine, print the table and write ``bench/results/<timestamp>.json``. See bench/README.md."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench.common import ROOT
from bench.plan import build_plan
from bench.report import PEERS, header_text, machine, notes_text, table, write_json

RESULTS = ROOT / "bench" / "results"


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes and one run per figure (a smoke run)")
    parser.add_argument("--runs", type=int, help="runs per figure (default: 3, or 1 with --quick)")
    parser.add_argument("--latency-probes", type=int, help="sparse pickup-latency probes (default 200, 15 quick)")
    parser.add_argument("--skip-ours", action="store_true", help="measure only the peers")
    parser.add_argument("--skip-peers", action="store_true", help="measure only ultimate_jobs")
    parser.add_argument(
        "--peer-idle",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also measure the peers' idle statements (default: on in the full run, off with --quick)",
    )
    return parser.parse_args(argv)


def measure_ours(plan: Any, log: Any, results: dict[str, Any], problems: dict[str, str]) -> None:
    from bench import ours

    try:
        ours.setup()
    except Exception as exc:
        problems["ultimate_jobs"] = f"setup failed: {exc!r}"
        return
    why = ours.driver_available()
    if why is not None:
        problems["ultimate_jobs"] = f"the postgres driver is not available: {why}"
        return
    try:
        results["ultimate_jobs"] = ours.run(plan, log, progress)
    except Exception as exc:
        problems["ultimate_jobs"] = f"failed: {exc}"


def measure_peers(plan: Any, log: Any, idle: bool, results: dict[str, Any], problems: dict[str, str]) -> None:
    from bench.peers_env import ensure_peers_venv, run_peer

    try:
        python = ensure_peers_venv(progress)
    except Exception as exc:
        for name in PEERS:
            problems[name] = f"could not build bench/.peers-venv: {exc!r}"
        return
    for name in PEERS:
        progress(f"{name}: enqueue, throughput, latency{', idle' if idle else ''}")
        try:
            results[name] = run_peer(python, name, plan, idle=idle, log=log)
        except Exception as exc:
            problems[name] = str(exc)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = build_plan(quick=args.quick, runs=args.runs, latency_probes=args.latency_probes)
    peer_idle = (not args.quick) if args.peer_idle is None else args.peer_idle
    started = datetime.now(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / f"{stamp}.workers.log"
    info = machine()
    progress(f"plan {plan.name}, {plan.runs} run(s) per figure; worker stderr goes to {log.relative_to(ROOT)}")
    results: dict[str, Any] = {}
    problems: dict[str, str] = {}
    if not args.skip_ours:
        measure_ours(plan, log, results, problems)
    if not args.skip_peers:
        measure_peers(plan, log, peer_idle, results, problems)
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = "\n\n".join([header_text(info, plan, results), table(plan, results), notes_text(results, problems)])
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
            "problems": problems,
            "table": text,
        },
    )
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
