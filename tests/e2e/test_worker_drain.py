"""A real worker process, SIGTERM while a job runs: the job is interrupted (back to ready, the attempt
uncounted), not failed, and the process exits inside its drain deadline — even when the body ignores
its signal and has to be abandoned there."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
STARTUP_S = 30.0
EXIT_S = 10.0


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def drain_under_sigterm(*args: str) -> tuple[int, float, dict[str, Any]]:
    """Start ``tests.e2e.drain_worker``, wait (bounded) for its job to run, SIGTERM it, and wait for
    the exit: answers the exit code, the seconds from the signal to the exit, and its JSON report."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    lines: queue.Queue[str | None] = queue.Queue()
    errors: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.drain_worker", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        stderr = proc.stderr
        readers = [
            threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True),
            threading.Thread(target=lambda: errors.extend(stderr), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            deadline = time.monotonic() + STARTUP_S
            seen: list[str] = []
            while "RUNNING" not in seen:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"the job never started; stdout={seen} stderr={''.join(errors)[-2000:]}"
                try:
                    line = lines.get(timeout=remaining)
                except queue.Empty:
                    continue
                assert line is not None, f"the worker exited before its job ran; stderr={''.join(errors)[-2000:]}"
                seen.append(line)

            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=EXIT_S)
            elapsed = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=EXIT_S)
            for reader in readers:
                reader.join(EXIT_S)

    rest: list[str] = []
    while (line := lines.get_nowait()) is not None:
        rest.append(line)
    assert code == 0, f"exit {code}; stderr={''.join(errors)[-2000:]}"
    assert rest, f"no report; stderr={''.join(errors)[-2000:]}"
    return code, elapsed, json.loads(rest[-1])


def test_sigterm_interrupts_the_running_job_and_exits_inside_the_deadline() -> None:
    _, elapsed, report = drain_under_sigterm("--drain-deadline", "5s")

    assert elapsed < 5.0, f"the drain took {elapsed:.2f}s, past its 5 s deadline"
    assert report["outcome"] == "interrupted"
    assert (report["state"], report["attempts"], report["last_code"]) == ("ready", 0, "X_DRAINING")
    assert (report["worker_state"], report["abandoned"]) == ("stopped", 0)


def test_a_body_that_ignores_the_signal_is_abandoned_at_the_deadline_and_the_process_exits() -> None:
    _, elapsed, report = drain_under_sigterm("--ignore-signal", "--drain-deadline", "1s")

    assert 1.0 <= elapsed < 5.0, f"exited {elapsed:.2f}s after SIGTERM; the deadline was 1 s"
    assert report["outcome"] is None  # never settled: its lease lapses and the queue delivers it again
    assert (report["state"], report["attempts"]) == ("running", 1)
    assert (report["worker_state"], report["abandoned"]) == ("stopped", 1)
