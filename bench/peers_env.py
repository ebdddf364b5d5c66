"""The peers' own virtualenv, ``bench/.peers-venv`` (gitignored; never in requirements.txt), and running a
peer script in it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench.common import ROOT

VENV = ROOT / "bench" / ".peers-venv"
PACKAGES = (
    "pgqueuer==1.6.*", "procrastinate==3.10.*", "asyncpg", "psycopg[binary]", "dramatiq[redis]==2.*",
    "celery[redis]==5.7.*",
)  # fmt: skip
PROBE = (
    "import asyncpg, psycopg, pgqueuer, procrastinate, dramatiq, celery, redis\n"
    "from importlib.metadata import version\n"
    "assert version('pgqueuer').startswith('1.6.') and version('procrastinate').startswith('3.10.')\n"
    "assert version('dramatiq').startswith('2.') and version('celery').startswith('5.7.')"
)
SCRIPTS = {"pgqueuer": "bench.peers.pgqueuer_bench", "procrastinate": "bench.peers.procrastinate_bench"}
PEER_TIMEOUT_S = 3 * 3600


def ensure_peers_venv(progress: Any = print) -> Path:
    """The venv's python, creating the venv (``python3 -m venv`` + pip install) on first use and
    installing the pinned packages when any is missing or at another version."""
    python = VENV / "bin" / "python"
    if not python.exists():
        progress(f"creating {VENV.relative_to(ROOT)} (first run)")
        subprocess.run([shutil.which("python3") or "python3", "-m", "venv", str(VENV)], check=True)
    if subprocess.run([str(python), "-c", PROBE], capture_output=True).returncode != 0:
        progress(f"installing {', '.join(PACKAGES)} into {VENV.relative_to(ROOT)}")
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PACKAGES], check=True)
    return python


def run_peer(python: Path, name: str, *args: str) -> dict[str, Any]:
    """Run one peer script command; answers its JSON line (``RuntimeError`` with its stderr when it fails)."""
    argv = [str(python), "-m", SCRIPTS[name], *args]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=PEER_TIMEOUT_S, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise RuntimeError(f"{name} {args[0]} failed (exit {done.returncode}):\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
