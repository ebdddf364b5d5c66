"""``manage.py jobs_worker``: run the worker role until SIGTERM/SIGINT drains it — one process, or
``--processes N`` under a supervisor (:mod:`ultimate_jobs.worker.supervisor`)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import CommandParser

from ...cli.roles import RoleCommand, add_worker_arguments, port
from ...conf import jobs_settings
from ...features.metrics import serve_counters
from ...integration.console import worker_start_line
from ...integration.schema import require_migrated
from ...runtime.gc_tuning import tune_worker_gc
from ...worker.boot import parse_concurrency, worker_from_settings
from ...worker.recycle import RecycleLimits, run_supervised
from ...worker.supervisor import parse_processes, supervisor_from_options


class Command(RoleCommand):
    help = "Run a job worker: claim, run and settle jobs for the given queues; SIGTERM drains it."

    def add_arguments(self, parser: CommandParser) -> None:
        add_worker_arguments(parser, drained="in-flight jobs")
        parser.add_argument(
            "--metrics-port",
            type=port,
            help="serve this process's counters (jobs_total, job_leases_lost_total) for Prometheus on this port; "
            "with --processes N the children serve on PORT..PORT+N-1",
        )
        parser.add_argument(
            "--processes", help="run N worker processes under a supervisor that restarts them (default 1)"
        )
        parser.add_argument(
            "--max-jobs", help="replace a worker process after it has run N jobs (implies a supervisor)"
        )
        parser.add_argument(
            "--max-memory", help="replace a worker process once its RSS passes e.g. 512MB (implies a supervisor)"
        )
        parser.add_argument("--supervisor-pid", type=int, help=argparse.SUPPRESS)  # set on the supervisor's children

    def handle(self, *args: Any, **options: Any) -> None:
        queues = [q for q in options["queues"].split(",") if q] if options["queues"] else None
        concurrency = parse_concurrency(options["concurrency"])
        processes = parse_processes(options["processes"])
        limits = RecycleLimits.from_options(max_jobs=options["max_jobs"], max_memory=options["max_memory"])
        supervisor_pid = options["supervisor_pid"]
        if supervisor_pid is None:  # a supervisor's children start after it has checked
            require_migrated(role="jobs_worker")
        if supervisor_pid is None and (processes > 1 or limits.any):
            supervisor = supervisor_from_options(
                options, processes=processes, from_command_line=getattr(self, "_called_from_command_line", False)
            )
            self.stdout.write(f"supervisor {os.getpid()} running {processes} worker processes")
            supervisor.run()
            return
        worker = worker_from_settings(
            queues=queues,
            concurrency=concurrency,
            async_concurrency=parse_concurrency(options["async_concurrency"], flag="--async-concurrency"),
            drain_deadline=options["drain_deadline"],
        )
        if options["metrics_port"] is not None:
            serve_counters(options["metrics_port"])
        if getattr(self, "_called_from_command_line", False) and jobs_settings().worker_gc == "tuned":
            tune_worker_gc()  # a process of its own, booted: see ultimate_jobs.runtime.gc_tuning
        self.stdout.write(worker_start_line(worker))
        if supervisor_pid is None:
            worker.run()
            return
        code = run_supervised(worker, limits, supervisor_pid=supervisor_pid)
        if code:
            raise SystemExit(code)
