"""``manage.py shop_demo``: run the demo shop's scenario in-process and print what happened to each job."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import OperationalError, connection
from psycopg import sql

from demo_project.shop.backend import driver_title
from demo_project.shop.scenario import ScenarioResult, run_scenario
from demo_project.shop.scenario_limits import run_limits_part
from demo_project.shop.scenario_maintenance import run_maintenance_part
from demo_project.shop.scenario_outbound import run_outbound_part
from demo_project.shop.scenario_outbox import run_outbox_part
from demo_project.shop.scenario_scheduler import run_scheduler_part


class Command(BaseCommand):
    help = (
        "Run the demo shop end to end in this process (the SQLite driver on the default SQLite file, or the Postgres "
        "driver on a PostgreSQL DATABASE_URL, or the Redis driver with ULTIMATE_JOBS_DRIVER=redis; frozen clock; "
        "the Order rows in the default database) and print a "
        "table of what happened to each job. -v 2 adds the job event log."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seed", type=int, default=0, help="seed for the retry jitter (default 0)")

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_database()
        call_command("migrate", verbosity=0, skip_checks=True)  # a fresh demo database works with no setup step
        result = run_scenario(seed=options["seed"])
        self.stdout.write(render(result, events=options["verbosity"] >= 2))
        parts = (
            ("the outbox", run_outbox_part),
            ("the scheduler and events", run_scheduler_part),
            ("maintenance: a backfill and the retention sweep", run_maintenance_part),
            ("outbound: an export of the orders and a signed webhook", run_outbound_part),
            ("limits: a fair queue and the payment provider's rate limit", run_limits_part),
        )
        for title, part in parts:
            self.stdout.write(f"\n== {title} ==")
            self.stdout.write("\n".join(part()))


def ensure_database() -> None:
    """Create the demo's database when there is none: an SQLite file (and its directory) is created by the
    first connection; a PostgreSQL server gets the database ``DATABASE_URL`` names."""
    if connection.vendor == "sqlite":
        Path(connection.settings_dict["NAME"]).parent.mkdir(parents=True, exist_ok=True)
        return
    try:
        connection.ensure_connection()
        return
    except OperationalError as exc:
        if "does not exist" not in str(exc):
            raise
    params = dict(connection.get_connection_params())
    name = params.pop("dbname")
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, dbname="postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def render(result: ScenarioResult, *, events: bool = False) -> str:
    """The printed report: the jobs table, then orders, counters, dead letters and on_settled pages."""
    started, ended = _when(result.started_ms), _when(result.ended_ms)
    out = [
        f"ultimate_jobs demo shop: {driver_title()}, frozen clock from {started}, jitter seed {result.seed}",
        "",
        table(
            ("job", "id", "state", "attempts", "outcomes", "note"),
            [
                (
                    j.name,
                    j.job_id[-8:],
                    j.state,
                    f"{j.attempts} of {j.max_attempts}",
                    " → ".join(j.outcomes),
                    _wrap(j.note),
                )
                for j in result.jobs
            ],
        ),
        "",
        result.dedupe,
        "",
        "orders",
        table(
            ("org", "order", "status", "charged", "charges", "emails"),
            [(o.org_id, o.number, o.status, "yes" if o.charged else "no", o.charges, o.emailed) for o in result.orders],
        ),
        "",
        "counters (driver.operator.counter_totals)",
        table(
            ("job", "done", "retried", "failed", "dead"),
            [(c.job, c.done, c.retried, c.failed, c.dead) for c in result.counters],
        ),
        "",
        f"dead letters ({len(result.dead_letters)})",
    ]
    for dead in result.dead_letters:
        out.append(f"  {dead.name} {dead.job_id[-8:]}, attempt {dead.attempts} of {dead.max_attempts}")
        out.append(f"    {dead.error}")
        if dead.verdict:
            out.append(f"    {dead.verdict}")
    out += ["", "on_settled paged on-call:"]
    out += [f"  {page}" for page in result.pages] or ["  (nobody)"]
    out += ["", f"the frozen clock moved from {started} to {ended}; no process waited for it."]
    if events:
        out += ["", "job events (the ultimate_jobs logger)"]
        out += [f"  {line}" for line in result.events]
    return "\n".join(out)


NOTE_WIDTH = 64


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain ``|``-separated table, columns as wide as their widest line; a cell holding newlines
    continues on the lines below its row, the other columns left blank there."""
    cells = [[str(c).split("\n") for c in headers]] + [[str(c).split("\n") for c in row] for row in rows]
    widths = [max(len(part) for row in cells for part in row[i]) for i in range(len(headers))]

    def lines(row: Sequence[list[str]]) -> list[str]:
        height = max(len(cell) for cell in row)
        return [
            " | ".join(
                (cell[n] if n < len(cell) else "").ljust(width) for cell, width in zip(row, widths, strict=True)
            ).rstrip()
            for n in range(height)
        ]

    rule = "-+-".join("-" * width for width in widths)
    return "\n".join(lines(cells[0]) + [rule] + [text for row in cells[1:] for text in lines(row)])


def _wrap(note: str) -> str:
    return "\n".join(textwrap.wrap(note, NOTE_WIDTH, break_on_hyphens=False)) or "-"


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%a %Y-%m-%d %H:%M:%S UTC")
