"""``manage.py jobs_relay``: run the outbox relay until SIGTERM/SIGINT drains it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...cli.roles import RoleCommand, duration_flag, whole_number
from ...contracts.operator import MAX_BULK_ROWS
from ...integration.schema import require_migrated
from ...outbox.boot import relay_from_settings


class Command(RoleCommand):
    help = "Run the outbox relay: publish committed x_outbox rows to the job driver, in stage order; SIGTERM drains it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=whole_number(1, MAX_BULK_ROWS),
            help=f"rows per claim, 1..{MAX_BULK_ROWS} (default 100)",
        )
        parser.add_argument(
            "--interval",
            type=duration_flag("--interval"),
            help="the claim interval while there is work, e.g. 200ms (the default)",
        )
        parser.add_argument(
            "--claim-lease",
            type=duration_flag("--claim-lease"),
            help="how long a dead relay's claimed rows wait, e.g. 30s (the default)",
        )
        parser.add_argument(
            "--drain-deadline",
            type=duration_flag("--drain-deadline"),
            help="how long a drain waits for the pass in flight, e.g. 25s",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        relay = relay_from_settings(
            batch_size=options["batch_size"],
            interval=options["interval"],
            claim_lease=options["claim_lease"],
            drain_deadline=options["drain_deadline"],
        )
        require_migrated(role="jobs_relay", outbox=True)
        self.stdout.write(f"relay {relay.relay_id} publishing {relay.store.name} outbox to {relay.driver.name}")
        relay.run()
