"""``manage.py jobs_worker``: run the worker role until SIGTERM/SIGINT drains it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...metrics import serve_counters
from ...worker.boot import parse_concurrency, worker_from_settings


class Command(BaseCommand):
    help = "Run a job worker: claim, run and settle jobs for the given queues; SIGTERM drains it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", help="comma-separated queue names (default: every registered queue)")
        parser.add_argument("--concurrency", action="append", help="N for every queue, or queue=N (repeatable)")
        parser.add_argument("--drain-deadline", help="how long a drain waits for in-flight jobs, e.g. 25s")
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="serve this process's counters (jobs_total, job_leases_lost_total) for Prometheus on this port",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queues = [q for q in options["queues"].split(",") if q] if options["queues"] else None
        worker = worker_from_settings(
            queues=queues,
            concurrency=parse_concurrency(options["concurrency"]),
            drain_deadline=options["drain_deadline"],
        )
        if options["metrics_port"] is not None:
            serve_counters(options["metrics_port"])
        self.stdout.write(f"worker {worker.worker_id} serving {', '.join(worker.queues)}")
        worker.run()
