"""The argument grammar of ``manage.py jobs``: one subparser per subcommand, ``--json`` on each."""

from __future__ import annotations

import argparse
from typing import Any

import django
from django.core.management.base import CommandError, CommandParser

from ..contracts.jobs import JOB_STATES
from ..contracts.operator import MAX_JOB_PAGE
from ..contracts.ordering import COUNT_CAP, DEFAULT_JOB_ORDER, JOB_ORDERS, ORDER_COLUMNS
from ..errors import UltimateError
from ..operator import MANIFEST_FILE
from ..operator.arguments import check_instant
from ..operator.dashboard import WINDOWS
from ..operator.queues import stats_window_ms

EXIT_OK = 0
EXIT_ERROR = 1
"""An operator error: the code and its fix are printed (``{"error": ...}`` on stdout with ``--json``)."""
EXIT_USAGE = 2
"""The arguments do not parse — argparse's own code, on the command line and under ``call_command``."""


class UsageParser(CommandParser):
    """A ``CommandParser`` whose usage errors exit 2 on both paths: argparse exits 2 on the command line,
    and under ``call_command`` the ``CommandError`` carries ``returncode=2`` (Django's carries 1)."""

    def error(self, message: str) -> Any:
        if self.called_from_command_line:
            return super().error(message)
        raise CommandError(f"Error: {message}", returncode=EXIT_USAGE)


def package_version() -> str:
    """What ``--version`` prints for every command of the app: this package's version, then Django's
    (Django's own commands print only Django's).

    >>> package_version()
    'ultimate_jobs 0.1.0 (Django 5.2.19)'
    """
    from .. import __version__

    return f"ultimate_jobs {__version__} (Django {django.get_version()})"


def instant_ms(value: str) -> int:
    """An instant for ``--created-from/--created-to``: epoch ms, an ISO date (midnight UTC) or an ISO
    datetime (UTC unless it names an offset), between 0001-01-01 and 9999-12-31 — anything else is a
    usage error, never a query (:func:`~ultimate_jobs.operator.arguments.check_instant`)."""
    try:
        return check_instant(value)
    except UltimateError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def duration(value: str) -> str:
    """A ``--since`` window, checked here (a duration of at most ten years) so a typo is a usage error,
    not a query."""
    try:
        stats_window_ms(value)
    except UltimateError as exc:
        raise argparse.ArgumentTypeError(exc.message.partition(" Fix: ")[0].removeprefix("since: ")) from None
    return value


def add_subcommands(parser: CommandParser) -> None:
    """Every subcommand of ``manage.py jobs``, each with its own ``--json``."""
    common = UsageParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the operator's data as JSON (errors too)")
    sub = parser.add_subparsers(dest="subcommand", metavar="<subcommand>", required=True, parser_class=UsageParser)

    def command(name: str, help: str) -> CommandParser:
        added: CommandParser = sub.add_parser(name, help=help, description=help, parents=[common])
        return added

    listing = command("list", f"one page of jobs, newest first unless --order (--limit <= {MAX_JOB_PAGE})")
    _filters(listing, state_required=False)
    listing.add_argument("--id-prefix", help="ids starting with this text")
    listing.add_argument("--created-from", type=instant_ms, help="created at or after (ISO date/datetime or epoch ms)")
    listing.add_argument("--created-to", type=instant_ms, help="created before (ISO date/datetime or epoch ms)")
    listing.add_argument("--limit", type=int, default=None, help=f"rows per page (default 100, at most {MAX_JOB_PAGE})")
    listing.add_argument(
        "--order",
        choices=JOB_ORDERS,
        default=DEFAULT_JOB_ORDER,
        metavar="ORDER",
        help=f"sort by {', '.join(ORDER_COLUMNS)}; a leading '-' sorts descending, written --order=-attempts "
        f"(default {DEFAULT_JOB_ORDER}). "
        f"Sorted by any but created, the newest {COUNT_CAP:,} matching rows are sorted",
    )
    listing.add_argument(
        "--count", action="store_true", help="also count the matching rows (an estimate, labelled, over 10,000)"
    )
    pages = listing.add_mutually_exclusive_group()
    pages.add_argument("--after", help="the next page: rows after this cursor (a page's next)")
    pages.add_argument("--before", help="the previous page: rows before this cursor (a page's previous)")

    command("show", "one job: steps, redacted input, error and stack, progress").add_argument(
        "id", help="a job id, or a unique start of one (as the worker prints it)"
    )
    retry = command("retry", "re-queue a finished job (done, failed, dead, cancelled)")
    retry.add_argument("id")
    retry.add_argument("--from-step", help="run this step and every later one again; earlier steps replay")
    cancel = command("cancel", "stop a live job (ready, delayed, running, suspended)")
    cancel.add_argument("id")
    cancel.add_argument("--reason", help="recorded on the row as its last error")
    command("remove", "delete a job and its steps (any state but running)").add_argument("id")
    command("promote", "make a job waiting on its run time due now").add_argument("id")

    for name, help in (
        ("requeue-many", "re-queue every finished row of --state, until none remains"),
        ("remove-many", "delete every row of --state (not running), until none remains"),
        ("promote-many", "make every waiting row of --state (delayed, ready) due now, until none remains"),
    ):
        _filters(command(name, help), state_required=True)

    command("pause", "stop workers claiming from a queue").add_argument("queue")
    command("resume", "let workers claim from a queue again").add_argument("queue")
    command("pause-task", "stop the scheduler dispatching a task").add_argument("task")
    command("resume-task", "dispatch a task again (its catch-up decides what it missed)").add_argument("task")
    command("workers", "every live worker: host, queues, slots, jobs in flight, last heartbeat")
    command("queues", "every queue: depth by state, oldest due row, paused")
    command("rates", "every rate limit: its rate, each key's next start, runs waiting on reserved instants")
    command("tasks", "every task: cron, tz, paused, last fire, next fire")
    manifest = command("manifest", f"every declared job and task; --write saves {MANIFEST_FILE}")
    manifest.add_argument(
        "--write", nargs="?", const=MANIFEST_FILE, default=None, metavar="PATH", help=f"default {MANIFEST_FILE}"
    )
    outbox = command("outbox", "the outbox: rows waiting to publish, rows set aside; retry or remove set-aside rows")
    outbox.add_argument("action", nargs="?", choices=("list", "retry", "remove"), default="list")
    outbox.add_argument("ids", nargs="*", metavar="id", help="the set-aside rows to retry or remove")
    outbox.add_argument("--limit", type=int, default=100, help="set-aside rows to list (default 100, at most 1000)")
    command("driver", "which driver the settings resolve to, and why (ULTIMATE_JOBS['DRIVER'] or the database)")
    stats = command(
        "stats", "settles per job — done, retried, failed, dead, mean run time — or, with --window, over time"
    )
    over = stats.add_mutually_exclusive_group()
    over.add_argument("--since", type=duration, default="24h", help="the window, e.g. 1h, 7d (default 24h)")
    over.add_argument(
        "--window",
        choices=tuple(WINDOWS),
        help="the dashboard's series instead: settles per outcome and mean run time, bucket by bucket, the queues "
        "now and what needs attention",
    )
    stats.add_argument("--job", help="with --window: the series of this job only")


def _filters(parser: CommandParser, *, state_required: bool) -> None:
    parser.add_argument("--state", choices=JOB_STATES, required=state_required)
    parser.add_argument("--queue")
    parser.add_argument("--name", help="the job name")
    parser.add_argument("--tenant", help="the tenant (org) id")
