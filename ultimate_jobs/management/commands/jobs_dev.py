"""``manage.py jobs_dev``: every background role in one process, for development."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from ...cli.reload import ReloadedRoles, run_reloader, under_reloader
from ...cli.roles import RoleCommand, add_worker_arguments, port
from ...conf import jobs_settings
from ...core.durations import parse_duration
from ...features.metrics import serve_counters
from ...integration.console import worker_start_line
from ...integration.schema import require_migrated
from ...outbox.boot import outbox_supported, relay_from_settings
from ...runtime.lifecycle import Role, Roles
from ...scheduler.boot import scheduler_from_settings
from ...worker.boot import parse_concurrency, worker_from_settings


class Command(RoleCommand):
    help = (
        "Run the scheduler, the outbox relay (when the jobs database is PostgreSQL or SQLite) and a worker in "
        "one process; SIGTERM/SIGINT drains them all within one drain deadline."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_worker_arguments(parser, drained="work in flight")
        parser.add_argument("--metrics-port", type=port, help="serve this process's job counters on this port")
        parser.add_argument(
            "--reload",
            action="store_true",
            help="drain and restart the roles when a Python file changes (Django's autoreloader, as runserver does)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not under_reloader():  # the reloader checked before it started the roles' process
            require_migrated(role="jobs_dev", outbox=outbox_supported())
        if not options.pop("reload"):
            self.roles(**options).run()
        elif under_reloader():
            ReloadedRoles(lambda: self.roles(**options), say=self.stdout.write).run()
        else:
            sys.exit(run_reloader(deadline_ms=drain_deadline_ms(options["drain_deadline"])))

    def roles(self, **options: Any) -> Roles:
        """Build the scheduler, the relay (on a PostgreSQL or SQLite jobs database) and a worker, print the
        banner and serve the counters when asked; answers them as one group to run."""
        deadline_ms = drain_deadline_ms(options["drain_deadline"])
        worker = worker_from_settings(
            queues=[q for q in options["queues"].split(",") if q] if options["queues"] else None,
            concurrency=parse_concurrency(options["concurrency"]),
            async_concurrency=parse_concurrency(options["async_concurrency"], flag="--async-concurrency"),
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
        return Roles(roles, drain_deadline_ms=deadline_ms)


def drain_deadline_ms(flag: str | None) -> int:
    """``--drain-deadline`` in milliseconds, or the setting's when the flag is not given."""
    return parse_duration(flag, field="--drain-deadline") if flag else jobs_settings().drain_deadline_ms
