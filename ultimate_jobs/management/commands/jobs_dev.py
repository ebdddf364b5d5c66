"""``manage.py jobs_dev``: every background role in one process, for development."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...cli.roles import RoleCommand, add_worker_arguments, port
from ...conf import jobs_settings
from ...durations import parse_duration
from ...lifecycle import Role, Roles
from ...metrics import serve_counters
from ...outbox.boot import outbox_supported, relay_from_settings
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

    def handle(self, *args: Any, **options: Any) -> None:
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
        self.stdout.write(
            f"jobs_dev: {', '.join(type(r).__name__ for r in roles)}; worker {worker.worker_id} serving "
            f"{', '.join(worker.queues)}"
        )
        if options["metrics_port"] is not None:
            serve_counters(options["metrics_port"])
        Roles(roles, drain_deadline_ms=deadline_ms).run()
