"""``manage.py jobs_scheduler``: run the scheduler role until SIGTERM/SIGINT drains it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...cli.roles import RoleCommand, duration_flag
from ...integration.schema import require_migrated
from ...scheduler.boot import scheduler_from_settings


class Command(RoleCommand):
    help = (
        "Run the task scheduler: fire every registered task's occurrences while this process holds the "
        "leader lease (the driver's own lease and watermarks); SIGTERM drains it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--lease-ttl",
            type=duration_flag("--lease-ttl"),
            help="the leader lease's TTL, renewed every third of it (default 30s)",
        )
        parser.add_argument(
            "--tick-interval", type=duration_flag("--tick-interval"), help="how often a round runs (default 1s)"
        )
        parser.add_argument(
            "--drain-deadline",
            type=duration_flag("--drain-deadline"),
            help="how long a drain waits for the round in flight, e.g. 25s",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        scheduler = scheduler_from_settings(
            lease_ttl=options["lease_ttl"],
            tick_interval=options["tick_interval"],
            drain_deadline=options["drain_deadline"],
        )
        scheduler.check_durable()
        require_migrated(role="jobs_scheduler")
        names = ", ".join(t.name for t in scheduler.tasks()) or "(no tasks)"
        self.stdout.write(f"scheduler {scheduler.leader.holder} tasks: {names}")
        scheduler.run()
