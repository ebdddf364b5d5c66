"""The peers' own virtualenv, ``bench/.peers-venv`` (gitignored; never in requirements.txt), and running a
peer script in it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.plan import Plan

VENV = ROOT / "bench" / ".peers-venv"
PACKAGES = ("pgqueuer", "procrastinate", "psycopg[binary]")
SCRIPTS = {"pgqueuer": "bench.peers.pgqueuer_bench", "procrastinate": "bench.peers.procrastinate_bench"}
PEER_TIMEOUT_S = 3 * 3600


def ensure_peers_venv(progress: Any = print) -> Path:
    """The venv's python, creating the venv (``python3 -m venv`` + pip install) on first use."""
    python = VENV / "bin" / "python"
    if not python.exists():
        progress(f"creating {VENV.relative_to(ROOT)} (first run)")
        subprocess.run([shutil.which("python3") or "python3", "-m", "venv", str(VENV)], check=True)
    probe = subprocess.run([str(python), "-c", "import pgqueuer, procrastinate, psycopg"], capture_output=True)
    if probe.returncode != 0:
        progress(f"installing {', '.join(PACKAGES)} into {VENV.relative_to(ROOT)}")
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PACKAGES], check=True)
    return python


def run_peer(python: Path, name: str, plan: Plan, *, idle: bool, log: Path) -> dict[str, Any]:
    """Run one peer script; answers its JSON line (``RuntimeError`` with its stderr when it fails)."""
    argv = [str(python), "-m", SCRIPTS[name], "run", "--plan", plan.as_json(), "--log", str(log)]
    if idle:
        argv.append("--idle")
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=PEER_TIMEOUT_S, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise RuntimeError(f"{name} bench failed (exit {done.returncode}):\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
