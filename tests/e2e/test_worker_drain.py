"""A real worker process, SIGTERM while a job runs: the job is interrupted (back to ready, the attempt
uncounted), not failed, and the process exits inside its drain deadline — even when the body ignores
its signal and has to be abandoned there."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import pytest

from tests.helpers import EXIT_S, POLL_S, REPO, Child, eventually

pytestmark = pytest.mark.e2e

STARTUP_S = 30.0


def drain_under_sigterm(*args: str) -> tuple[int, float, dict[str, Any]]:
    """Start ``tests.e2e.drain_worker``, wait (bounded) for its job to run, SIGTERM it, and wait for
    the exit: answers the exit code, the seconds from the signal to the exit, and its JSON report."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    child = Child("drain-worker", [sys.executable, "-m", "tests.e2e.drain_worker", *args], env)
    try:

        def running() -> bool:
            if "RUNNING" in child.lines:
                return True
            if child.popen.poll() is not None:
                raise RuntimeError(f"the worker exited before its job ran: {child.describe()}")
            return False

        eventually(running, timeout=STARTUP_S, interval=POLL_S)
        sent = time.monotonic()
        child.signal(signal.SIGTERM)
        code = child.wait(timeout=EXIT_S)
        elapsed = time.monotonic() - sent
        lines = child.finished_lines()
    finally:
        child.close()
    assert code == 0, child.describe()
    assert lines[-1] != "RUNNING", f"no report: {child.describe()}"
    return code, elapsed, json.loads(lines[-1])


def test_sigterm_interrupts_the_running_job_and_exits_inside_the_deadline() -> None:
    _, elapsed, report = drain_under_sigterm("--drain-deadline", "5s")

    assert elapsed < 5.0, f"the drain took {elapsed:.2f}s, past its 5 s deadline"
    assert report["outcome"] == "interrupted"
    assert (report["state"], report["attempts"], report["last_code"]) == ("ready", 0, "X_DRAINING")
    assert (report["worker_state"], report["abandoned"]) == ("stopped", 0)


@pytest.mark.slow
def test_a_body_that_ignores_the_signal_is_abandoned_at_the_deadline_and_the_process_exits() -> None:
    _, elapsed, report = drain_under_sigterm("--ignore-signal", "--drain-deadline", "1s")

    assert 1.0 <= elapsed < 5.0, f"exited {elapsed:.2f}s after SIGTERM; the deadline was 1 s"
    assert report["outcome"] is None  # never settled: its lease lapses and the queue delivers it again
    assert (report["state"], report["attempts"]) == ("running", 1)
    assert (report["worker_state"], report["abandoned"]) == ("stopped", 1)
