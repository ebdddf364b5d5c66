"""``manage.py jobs_backfill [NAME]``: dry-run, gate and enqueue declared backfills; the ledger; what is
pending (see :mod:`ultimate_jobs.cli.backfill` and docs/backfills.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...cli import backfill
from .jobs import Command as JobsCommand
from .jobs import OperatorExit


class Command(JobsCommand):
    help = (
        "Backfills: NAME dry-runs one (its count), NAME --write enqueues it (--force: again, into a new ledger "
        "row), --all [--write] every pending one, --pending each declared one's state (exit 1 while any is "
        "unswept), --list the ledger. --json; exit 0 ok, 1 an operator error or something unswept, 2 usage."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        backfill.add_arguments(parser)
        self.parser = parser  # flags that do not go together are its usage errors (exit 2)

    def handle(self, *args: Any, **options: Any) -> None:
        code = backfill.run(options, self.stdout, self.stderr, usage=self.parser.error)
        if code:
            raise OperatorExit(f"manage.py jobs_backfill exited {code}", returncode=code)
