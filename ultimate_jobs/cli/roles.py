"""What the role commands share — ``jobs_worker``, ``jobs_scheduler``, ``jobs_relay``, ``jobs_dev``.

A flag value that cannot be right is a usage error: the flag's type refuses it, argparse prints why and
the process exits 2 (``returncode=2`` under ``call_command``). A value the role itself refuses, and any
coded error while it runs, exits 1 with ``CODE: message`` and its fix on stderr. Neither prints a
traceback (unless ``--traceback`` asks for one).

>>> parser.add_argument("--drain-deadline", type=duration_flag("--drain-deadline"))
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..core.durations import format_duration, parse_duration
from ..defaults import MAX_ASYNC_CONCURRENCY
from ..errors import UltimateError
from ..integration.console import LOG_FORMATS, install_console
from ..operator.arguments import check_name, shown
from .parsing import EXIT_ERROR, UsageParser, package_version
from .render import error_text

MAX_ROLE_DURATION_MS = 86_400_000
"""The longest duration a role flag takes (a day): a drain deadline, lease or interval past that is a
typo, and one past what a thread can wait would only fail when the role drains."""

MAX_SLOTS = 1_000
"""The most slots ``--concurrency`` gives a queue: a slot is a thread, and the claim asks for free slots."""


class RoleCommand(BaseCommand):
    """A management command that builds a role and runs it: usage errors exit 2 on both paths (the
    ``jobs`` command's :class:`~ultimate_jobs.cli.UsageParser`), an ``UltimateError`` exits 1 with its
    code and fix."""

    def get_version(self) -> str:
        """``--version``: this package's version and Django's."""
        return package_version()

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = UsageParser
        parser.add_argument("--quiet", action="store_true", help="print warnings and errors only (the same as -v 0)")
        parser.add_argument(
            "--log-format",
            choices=LOG_FORMATS,
            default="text",
            help="text: a line per attempt outcome (default); json: one JSON object per log record",
        )
        return parser

    def execute(self, *args: Any, **options: Any) -> str | None:
        if getattr(self, "_called_from_command_line", False):  # call_command (a test) keeps its own logging
            verbosity = 0 if options.get("quiet") else int(options.get("verbosity", 1))
            install_console(verbosity=verbosity, log_format=options.get("log_format") or "text")
        try:
            return super().execute(*args, **options)
        except UltimateError as exc:
            if options.get("traceback"):
                raise
            if getattr(self, "_called_from_command_line", False):
                self.stderr.write(error_text(exc))
                sys.exit(EXIT_ERROR)
            raise CommandError(f"{exc.code}: {exc.message}", returncode=EXIT_ERROR) from exc


def duration_flag(flag: str) -> Callable[[str], str]:
    """The type of a duration flag: ``'25s'``, ``'200ms'``… of at most :data:`MAX_ROLE_DURATION_MS`;
    the text itself is kept (a supervisor passes it on to its children)."""

    def duration(value: str) -> str:
        try:
            ms = parse_duration(value, field=flag)
        except UltimateError as exc:  # argparse names the flag already
            raise argparse.ArgumentTypeError(exc.message.removeprefix(f"{flag}: ")) from None
        if ms > MAX_ROLE_DURATION_MS:
            raise argparse.ArgumentTypeError(
                f"{shown(value)} is longer than {format_duration(MAX_ROLE_DURATION_MS)}; write e.g. 25s"
            )
        return value

    return duration


def port(value: str) -> int:
    """The type of ``--metrics-port``: a TCP port, 1 to 65535."""
    text = value.strip()
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 65_535):
        raise argparse.ArgumentTypeError(f"{shown(value)} is not a TCP port; write a number from 1 to 65535")
    return int(text)


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """The type of a count flag (``--batch-size``): a whole number in ``low..high``."""

    def count(value: str) -> int:
        text = value.strip()
        if not (text.isascii() and text.isdigit() and len(text) <= 12 and low <= int(text) <= high):
            raise argparse.ArgumentTypeError(f"{shown(value)} is not a whole number in {low}..{high}")
        return int(text)

    return count


def queue_list(value: str) -> str:
    """The type of ``--queues``: comma-separated queue names, at least one, each one a row can hold (no
    NUL byte, at most 500 characters); the text itself is kept."""
    names = [name for name in value.split(",") if name]
    if not names:
        raise argparse.ArgumentTypeError(f"{shown(value)} names no queue; write e.g. --queues default,emails")
    for name in names:
        try:
            check_name(name, what="queue")
        except UltimateError as exc:
            raise argparse.ArgumentTypeError(f"{shown(name)}: {exc.message.partition(' Fix: ')[0]}") from None
    return value


def _per_queue_count(low: int, high: int) -> Callable[[str], str]:
    """The type of a per-queue count flag: ``N`` for every queue, or ``queue=N``, N in ``low..high``; the
    text itself is kept (a supervisor passes it on to its children)."""

    def per_queue(value: str) -> str:
        queue, sep, count = value.partition("=") if "=" in value else ("", "", value)
        if sep:
            try:
                check_name(queue, what="queue")
            except UltimateError as exc:
                raise argparse.ArgumentTypeError(f"{shown(value)}: {exc.message.partition(' Fix: ')[0]}") from None
        whole_number(low, high)(count)
        return value

    return per_queue


concurrency = _per_queue_count(1, MAX_SLOTS)
"""The type of one ``--concurrency``: ``N`` for every queue, or ``queue=N``, N in 1..:data:`MAX_SLOTS`."""

async_concurrency = _per_queue_count(0, MAX_ASYNC_CONCURRENCY)
"""The type of one ``--async-concurrency``: ``N`` for every queue, or ``queue=N``, N in
0..:data:`~ultimate_jobs.defaults.MAX_ASYNC_CONCURRENCY` (0: that queue runs no async job)."""


def add_worker_arguments(parser: CommandParser, *, drained: str) -> None:
    """The flags ``jobs_worker`` and ``jobs_dev`` share: ``--queues``, ``--concurrency``,
    ``--async-concurrency`` and ``--drain-deadline`` (``drained``: what a drain waits for)."""
    parser.add_argument(
        "--queues", type=queue_list, help="comma-separated queue names (default: every registered queue)"
    )
    parser.add_argument(
        "--concurrency", type=concurrency, action="append", help="N for every queue, or queue=N (repeatable)"
    )
    parser.add_argument(
        "--async-concurrency",
        type=async_concurrency,
        action="append",
        help="how many async jobs run at once on the worker's event loop: N for every queue, or queue=N "
        "(repeatable; default 100 on a queue with an async job, else 0)",
    )
    parser.add_argument(
        "--drain-deadline",
        type=duration_flag("--drain-deadline"),
        help=f"how long a drain waits for {drained}, e.g. 25s",
    )
