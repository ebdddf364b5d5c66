"""docs/conformance.md's driver without an operator store (tests/unit/bare_driver_example.py), run as the page
runs it: every scenario passes or is skipped for a capability the driver declares ``None``, never for
anything else."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECLARED_AWAY = re.compile(r"driver 'bare' declares (operator|leases|leader|scheduler_state|backfills)=None")


def test_the_pages_driver_passes_the_suite_skipping_only_what_it_declares_away() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly", "tests/unit/bare_driver_example.py"],
        cwd=ROOT,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert ran.returncode == 0, ran.stdout[-3_000:] + ran.stderr[-2_000:]
    skips = [line for line in ran.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all(DECLARED_AWAY.search(line) for line in skips), skips
    summary = re.search(r"(\d+) passed, (\d+) skipped", ran.stdout)
    assert summary is not None and int(summary[1]) > 50, ran.stdout[-500:]
