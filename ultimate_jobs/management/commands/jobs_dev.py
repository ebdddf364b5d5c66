"""``manage.py jobs_dev``: every background role in one process, for development."""

from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import CommandParser
from django.utils import autoreload

from ...cli.roles import RoleCommand, add_worker_arguments, port
from ...conf import jobs_settings
from ...core.durations import parse_duration
from ...features.metrics import serve_counters
from ...integration.console import worker_start_line
from ...outbox.boot import outbox_supported, relay_from_settings
from ...runtime.lifecycle import Role, Roles
from ...scheduler.boot import scheduler_from_settings
from ...worker.boot import parse_concurrency, worker_from_settings


class Command(RoleCommand):
    help = (
        "Run the scheduler, the outbox relay (on a Postgres jobs database) and a worker in one process; "
        "SIGTERM/SIGINT drains them all within one drain deadline."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_worker_arguments(parser, drained="work in flight")
        parser.add_argument("--metrics-port", type=port, help="serve this process's job counters on this port")
        parser.add_argument(
            "--reload",
            action="store_true",
            help="restart the roles when a Python file changes (Django's autoreloader, as runserver does)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options.pop("reload"):
            autoreload.run_with_reloader(self.serve, reloading=True, **options)
            return
        self.serve(reloading=False, **options)

    def serve(self, *, reloading: bool, **options: Any) -> None:
        """Build the roles and run them until a signal drains them — or, under ``--reload``, until a code
        change: the roles drain (within the drain deadline), then the autoreloader starts a fresh process."""
        deadline = options["drain_deadline"]
        deadline_ms = (
            parse_duration(deadline, field="--drain-deadline") if deadline else jobs_settings().drain_deadline_ms
        )
        worker = worker_from_settings(
            queues=[q for q in options["queues"].split(",") if q] if options["queues"] else None,
            concurrency=parse_concurrency(options["concurrency"]),
            drain_deadline=deadline_ms,
        )
        # The worker closes the shared driver, so it goes last: the scheduler's round and the relay's
        # last pass finish first.
        roles: list[Role] = [scheduler_from_settings(drain_deadline=deadline_ms)]
        if outbox_supported():
            roles.append(relay_from_settings(drain_deadline=deadline_ms))
        roles.append(worker)
        self.stdout.write(f"jobs_dev: {', '.join(type(r).__name__ for r in roles)}; {worker_start_line(worker)}")
        if options["metrics_port"] is not None:
            serve_counters(options["metrics_port"])
        group = Roles(roles, drain_deadline_ms=deadline_ms)
        if not reloading:
            group.run()
            return
        stopped = threading.Event()

        def drain_on_change(sender: object, file_path: object, **kwargs: Any) -> None:
            self.stdout.write(f"jobs_dev: {file_path} changed; draining, then restarting")
            group.request_drain("reload")
            stopped.wait(deadline_ms / 1000 + 5)

        autoreload.file_changed.connect(drain_on_change, weak=False)
        try:
            group.run(install_signals=False)  # the autoreloader's thread: signals belong to its main thread
        finally:
            stopped.set()
