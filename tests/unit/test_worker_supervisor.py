"""``jobs_worker --processes``: option validation, the child command line, the recycle watch on a stand-in
worker, and the supervisor's restart and stop rules over tiny real child processes (``python -c``)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.helpers import eventually
from ultimate_jobs.errors import InvariantError
from ultimate_jobs.worker import WorkerStats
from ultimate_jobs.worker import supervisor as supervisor_module
from ultimate_jobs.worker.recycle import EXIT_RECYCLED, RecycleLimits, RecycleWatch, parse_size
from ultimate_jobs.worker.supervisor import Supervisor, child_argv, parse_processes


@pytest.mark.parametrize(
    ("text", "size"),
    [("512MB", 512 * 1024**2), ("512M", 512 * 1024**2), ("512MiB", 512 * 1024**2), ("2gb", 2 * 1024**3),
     ("800KB", 800 * 1024), ("4096", 4096), ("10B", 10)],
)  # fmt: skip
def test_memory_sizes_count_in_1024s(text: str, size: int) -> None:
    assert parse_size(text, field="--max-memory") == size


@pytest.mark.parametrize("text", ["", "0", "0MB", "12XB", "-1MB", "1.5GB", "MB"])
def test_a_memory_size_that_is_not_one_is_refused_with_a_code(text: str) -> None:
    with pytest.raises(InvariantError) as caught:
        parse_size(text, field="--max-memory")
    assert caught.value.code == "X_INVARIANT"
    assert "write e.g. 512MB" in caught.value.message


@pytest.mark.parametrize("text", ["0", "-2", "two", "1.5"])
def test_processes_and_max_jobs_must_be_whole_numbers_of_one_or_more(text: str) -> None:
    with pytest.raises(InvariantError, match="write a whole number of 1 or more") as caught:
        parse_processes(text)
    assert caught.value.meta == {"field": "--processes"}
    with pytest.raises(InvariantError, match="--max-jobs"):
        RecycleLimits.from_options(max_jobs=text, max_memory=None)
    assert parse_processes(None) == 1 and parse_processes("4") == 4


@pytest.mark.parametrize(
    "options", [{"processes": "0"}, {"max_jobs": "none"}, {"max_memory": "lots"}, {"processes": "2", "max_jobs": "0"}]
)
def test_the_command_refuses_bad_flags_before_it_starts_anything(options: dict[str, str]) -> None:
    with pytest.raises(CommandError) as caught:  # exit 1 with the code, as on the command line
        call_command("jobs_worker", **options)
    assert caught.value.returncode == 1 and str(caught.value).startswith("X_INVARIANT: ")
    assert isinstance(caught.value.__cause__, InvariantError)


def test_a_child_runs_the_same_command_without_processes_on_its_own_metrics_port() -> None:
    options: dict[str, Any] = {
        "queues": "emails,default",
        "concurrency": ["emails=2", "default=8"],
        "async_concurrency": ["default=500"],
        "drain_deadline": "60s",
        "metrics_port": 9100,
        "processes": "4",
        "max_jobs": "1000",
        "max_memory": "512MB",
        "settings": "shop.settings",
        "pythonpath": None,
        "verbosity": 1,
        "traceback": True,
        "no_color": False,
    }
    argv = child_argv(options, prefix=["python", "manage.py"], slot=2, supervisor_pid=41)
    assert argv == [
        *("python", "manage.py", "jobs_worker", "--supervisor-pid", "41"),
        *("--queues", "emails,default", "--drain-deadline", "60s", "--max-jobs", "1000", "--max-memory", "512MB"),
        *("--settings", "shop.settings", "--verbosity", "1"),
        *("--concurrency", "emails=2", "--concurrency", "default=8", "--async-concurrency", "default=500"),
        *("--metrics-port", "9102", "--traceback"),
    ]
    assert "--processes" not in argv


class StandIn:
    """The public surface the watch reads: ``state``, ``stats``, ``worker_id``, ``accept()``."""

    def __init__(self) -> None:
        self.state = "running"
        self.stats = WorkerStats()
        self.worker_id = "w-1"
        self.accepted: list[str] = []

    def accept(self, *, reason: str = "stop") -> None:
        self.accepted.append(reason)
        self.state = "draining"


def watch_over(worker: StandIn, limits: RecycleLimits, *, rss: int = 0, parent: int | None = None) -> RecycleWatch:
    closes: list[int] = []
    watch = RecycleWatch(
        worker,  # type: ignore[arg-type]
        limits,
        supervisor_pid=os.getppid() if parent is None else parent,
        request_close=lambda: closes.append(1),
        rss=lambda: rss,
    )
    watch.closes = closes  # type: ignore[attr-defined]
    return watch


def test_past_max_jobs_the_watch_drains_the_worker_once() -> None:
    worker = StandIn()
    watch = watch_over(worker, RecycleLimits(max_jobs=5))
    worker.stats.completed, worker.stats.retried, worker.stats.shed = 2, 2, 9  # shed claims ran nothing
    assert watch.run_once() is None and worker.accepted == []

    worker.stats.dead = 1
    assert watch.run_once() == "max-jobs"
    assert worker.accepted == ["recycle"] and watch.closes == [1]  # type: ignore[attr-defined]
    assert watch.run_once() is None and worker.accepted == ["recycle"]  # once
    assert watch.recycled


def test_memory_is_judged_once_a_job_ran_so_a_fat_fresh_process_does_not_recycle_in_a_loop() -> None:
    worker = StandIn()
    watch = watch_over(worker, RecycleLimits(max_memory_bytes=100), rss=150)
    assert watch.run_once() is None
    worker.stats.completed = 1
    assert watch.run_once() == "max-memory" and watch.recycled


def test_a_worker_not_running_yet_is_left_alone() -> None:
    worker = StandIn()
    worker.state = "idle"
    worker.stats.completed = 10
    assert watch_over(worker, RecycleLimits(max_jobs=1)).run_once() is None


def test_an_orphaned_child_drains_itself_and_does_not_count_as_a_recycle() -> None:
    worker = StandIn()
    watch = watch_over(worker, RecycleLimits(), parent=os.getppid() + 1)
    assert watch.run_once() == "orphaned"
    assert worker.accepted == ["orphaned"] and not watch.recycled


def exits(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.jobs for r in caplog.records if r.getMessage() == "jobs.supervisor.child-exited"]  # type: ignore[attr-defined]


def exiting(code: int) -> Supervisor:
    """One slot whose child exits with ``code`` as soon as it starts."""
    supervisor = Supervisor(
        processes=1, argv_for=lambda slot: [sys.executable, "-c", f"raise SystemExit({code})"], drain_deadline_ms=100
    )
    supervisor.start()
    return supervisor


def test_a_recycled_child_is_replaced_in_the_pass_that_reaps_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ultimate_jobs")
    supervisor = exiting(EXIT_RECYCLED)
    eventually(lambda: supervisor.run_once() == 1, timeout=10.0)  # reaped and started again at once
    (first, *_) = exits(caplog)
    assert (first["how"], first["exit_code"], first["restart_in_s"]) == ("recycled", EXIT_RECYCLED, 0.0)
    assert supervisor.stop()


def test_a_crashing_child_is_replaced_after_a_backoff_that_doubles_while_it_keeps_crashing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ultimate_jobs")
    supervisor = exiting(3)
    # ``now`` drives the restart clock: 0 is "just after the start", far from the 30 s a stable child lives
    eventually(lambda: supervisor.run_once(now=0.0) == 0 and exits(caplog), timeout=10.0)
    assert supervisor.run_once(now=0.99) == 0  # the first backoff is 1 s
    assert supervisor.run_once(now=1.0) == 1
    eventually(lambda: supervisor.run_once(now=1.0) == 0 and len(exits(caplog)) == 2, timeout=10.0)
    assert supervisor.run_once(now=2.99) == 0
    assert supervisor.run_once(now=3.0) == 1  # the second quick crash waited 2 s
    crashes = exits(caplog)
    assert [(e["how"], e["exit_code"], e["restart_in_s"]) for e in crashes] == [
        ("crashed", 3, 1.0),
        ("crashed", 3, 2.0),
    ]
    assert supervisor.stop()


def test_stop_sigkills_a_child_that_outlives_the_drain_deadline_plus_the_margin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ultimate_jobs")
    monkeypatch.setattr(supervisor_module, "STOP_MARGIN_S", 0.2)
    ready = tmp_path / "ready"
    code = (
        "import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    )
    supervisor = Supervisor(processes=1, argv_for=lambda slot: [sys.executable, "-c", code], drain_deadline_ms=100)
    supervisor.start()
    eventually(ready.exists, timeout=10.0)
    (pid,) = supervisor.pids()

    assert supervisor.stop() is False
    assert supervisor.pids() == []
    assert [(e["pid"], e["how"], e["signal"]) for e in exits(caplog)] == [(pid, "stopped", "SIGKILL")]
