"""``manage.py jobs <subcommand>``: the operator CLI (see :mod:`ultimate_jobs.cli` and docs/operating.md)."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...cli import UsageParser, add_subcommands, run
from ...cli.parsing import package_version


class OperatorExit(CommandError):
    """The subcommand finished with a non-zero exit code and has printed why. On the command line the
    process exits with ``returncode``; under ``call_command`` this is raised."""


class Command(BaseCommand):
    help = (
        "Operate the job queues: list, show, retry, cancel, remove and promote jobs; requeue, remove or "
        "promote them in bulk; pause and resume queues and tasks; workers, queues, tasks, manifest, stats, "
        "outbox; which driver the settings resolve to (driver). "
        "--json on every subcommand; exit 0 ok, 1 an operator error (its code and fix printed), 2 usage."
    )

    def get_version(self) -> str:
        """``--version``: this package's version and Django's."""
        return package_version()

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # A usage error is exit 2 under call_command too (Django's CommandParser raises returncode 1).
        parser.__class__ = UsageParser
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        add_subcommands(parser)

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except OperatorExit as exc:
            if getattr(self, "_called_from_command_line", False):
                sys.exit(exc.returncode)  # already printed: no "CommandError: ..." line on top
            raise

    def handle(self, *args: Any, **options: Any) -> None:
        code = run(options, self.stdout, self.stderr)
        if code:
            raise OperatorExit(f"manage.py jobs {options['subcommand']} exited {code}", returncode=code)
