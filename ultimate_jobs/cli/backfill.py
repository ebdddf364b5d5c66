"""``manage.py jobs_backfill``: the declared backfills — what is pending, the ledger, a dry run, the enqueue.

A named backfill (or every pending one, ``--all``) is gated — declared in this process
(``X_BACKFILL_UNKNOWN``), meant for this deployment (``X_BACKFILL_ENVIRONMENT``), its ``requires``
migration applied (``X_BACKFILL_MIGRATION_PENDING``), not completed already unless ``--force``
(``X_BACKFILL_APPLIED``) — and then counted (the dry run, the default) or enqueued (``--write``). The
pass itself always runs on a worker: ``--write`` never sweeps inline.

>>> call_command("jobs_backfill", "--pending", "--json", stdout=out)   # exit 1 while anything is unswept
>>> call_command("jobs_backfill", "drop-legacy", "--write", stdout=out)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from django.core.management.base import CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.recorder import MigrationRecorder

from .. import operator
from ..conf import context_factory, jobs_settings
from ..contracts.operator import MAX_JOB_PAGE
from ..contracts.schedules import BACKFILL_STATUSES
from ..core import registry
from ..core.definition import JobHandle
from ..core.installed import job_driver
from ..core.scope import cross_tenant
from ..errors import (
    BackfillAppliedError,
    BackfillEnvironmentError,
    BackfillMigrationPendingError,
    BackfillPendingError,
    BackfillRunningError,
    BackfillUnknownError,
    JobArgumentInvalidError,
    UltimateError,
    code_of,
)
from ..features.backfills import BackfillState, BackfillStateRow, declaration_of, is_backfill, pending_backfills
from ..operator.arguments import shown
from ..operator.backfills import DEFAULT_BACKFILL_LIMIT
from . import render
from .commands import Invocation, Output, guarded
from .parsing import EXIT_ERROR, EXIT_USAGE

Action = Literal["dry-run", "enqueued", "joined", "refused", "left"]


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """What ``jobs_backfill`` found and did for one backfill: its state (as ``--pending`` reports it),
    the rows ``count`` matches (a dry run of a backfill that declares one), and the action — ``dry-run``,
    ``enqueued``, ``joined`` (a live pass holds the name), ``refused`` (``error`` says why) or ``left``
    (``--all`` acts only on pending and failed names)."""

    name: str
    state: BackfillState
    action: Action
    count: int | None = None
    job_id: str | None = None
    run_id: str | None = None
    error: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``)."""
        return {
            "name": self.name,
            "state": self.state,
            "action": self.action,
            "count": self.count,
            "job_id": self.job_id,
            "run_id": self.run_id,
            "error": self.error,
        }


def add_arguments(parser: CommandParser) -> None:
    """The grammar of ``manage.py jobs_backfill``; which flags go together is checked by :func:`run`."""
    parser.add_argument("backfill", nargs="?", metavar="NAME", help="the backfill to dry-run, or enqueue with --write")
    parser.add_argument("--write", action="store_true", help="enqueue the pass (a worker runs it); default: dry run")
    parser.add_argument("--force", action="store_true", help="sweep a completed backfill again, into a new ledger row")
    parser.add_argument("--all", action="store_true", help="every pending or failed backfill, one at a time")
    parser.add_argument(
        "--input",
        metavar="JSON",
        help='with NAME: more input for the pass, a JSON object (one org\'s pass: \'{"org_id": "org-1"}\')',
    )
    parser.add_argument(
        "--pending", action="store_true", help="each declared backfill's state; exit 1 if any is unswept"
    )
    parser.add_argument("--list", action="store_true", help="the ledger, newest pass first")
    parser.add_argument("--name", help="with --list: one backfill's passes")
    parser.add_argument("--status", choices=BACKFILL_STATUSES, help="with --list: passes of this status")
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help=f"with --list: rows (default {DEFAULT_BACKFILL_LIMIT}, at most {MAX_JOB_PAGE})",
    )
    parser.add_argument("--json", action="store_true", help="print the operator's data as JSON (errors too)")


def run(options: Mapping[str, Any], out: Output, err: Output, usage: Callable[[str], Any] | None = None) -> int:
    """Run ``jobs_backfill`` with parsed ``options``; answers the exit code. A bad combination of flags
    goes to ``usage`` (the command's parser's ``error``: usage on stderr and exit 2), by default a
    ``CommandError`` with ``returncode=2``."""
    o = options
    _usage = usage or _usage_error
    modes = [flag for flag, on in (("NAME", o["backfill"]), ("--all", o["all"]), ("--pending", o["pending"]),
                                  ("--list", o["list"])) if on]  # fmt: skip
    if len(modes) != 1:
        _usage(
            "name one backfill, or pass exactly one of --all, --pending, --list"
            + (f" (got {', '.join(modes)})" if modes else "")
        )
    listing_flags = [
        f for f, v in (("--name", o["name"]), ("--status", o["status"]), ("--limit", o["limit"])) if v is not None
    ]
    if listing_flags and not o["list"]:
        _usage(f"{', '.join(listing_flags)} go with --list only")
    if (o["write"] or o["force"]) and (o["pending"] or o["list"]):
        _usage("--write and --force go with a NAME or --all")
    if o.get("input") is not None and not o["backfill"]:
        _usage("--input goes with a NAME: the input of that one backfill's pass")
    if o["force"] and o["all"]:
        _usage("--force sweeps one named backfill again; name it (--all acts on pending and failed ones)")
    ctx = Invocation(options, out, err)
    if o["pending"]:
        return guarded(_pending, ctx)
    if o["list"]:
        return guarded(_list, ctx)
    if o["all"]:
        return guarded(_all, ctx)
    return guarded(_named, ctx)


def _usage_error(message: str) -> None:
    raise CommandError(f"Error: {message}", returncode=EXIT_USAGE)


def _pending(ctx: Invocation) -> int | None:
    report = pending_backfills()
    verdict = None
    if report.pending:
        verdict = BackfillPendingError(
            f"unswept: {', '.join(report.pending)}. Fix: python manage.py jobs_backfill --all --write",
            {"pending": report.pending},
        )
    shown_report = report.as_dict() | ({"error": verdict.as_dict()} if verdict else {})
    ctx.emit(shown_report, _render_pending(report.environment, report.rows, report.orphaned))
    if verdict is not None:
        ctx.note(f"{verdict.code}: {verdict.message}")
        return EXIT_ERROR
    return None


def _list(ctx: Invocation) -> None:
    o = ctx.options
    rows = operator.inspect_backfills(
        name=o["name"], status=o["status"], **({"limit": o["limit"]} if o["limit"] is not None else {})
    )
    ctx.emit({"backfills": [r.as_dict() for r in rows]}, _render_ledger(rows))


def _named(ctx: Invocation) -> None:
    name = ctx.options["backfill"]
    states = {r.name: r for r in pending_backfills().rows}
    plan = _plan(ctx, name, states.get(name))
    ctx.emit(plan.as_dict(), _render_plans([plan]))


def _all(ctx: Invocation) -> int | None:
    """Every pending or failed backfill, each on its own: a refusal or an error is recorded and the next
    name goes on; the exit code is 1 when any was refused."""
    report = pending_backfills()
    plans: list[BackfillPlan] = []
    for row in report.rows:
        if row.name not in report.pending:
            plans.append(BackfillPlan(row.name, row.state, "left"))
            continue
        try:
            plans.append(_plan(ctx, row.name, row))
        except Exception as exc:  # isolated per name: one wedged backfill never blocks the others
            error = exc.as_dict() if isinstance(exc, UltimateError) else {
                "code": code_of(exc) or type(exc).__name__, "message": str(exc), "meta": {},
            }  # fmt: skip
            plans.append(BackfillPlan(row.name, row.state, "refused", error=error))
    refused = [p for p in plans if p.action == "refused"]
    ctx.emit(
        {
            "environment": report.environment,
            "write": bool(ctx.options["write"]),
            "backfills": [p.as_dict() for p in plans],
        },
        _render_plans(plans) if plans else "no backfills are declared.",
    )
    return EXIT_ERROR if refused else None


def _plan(ctx: Invocation, name: str, row: BackfillStateRow | None) -> BackfillPlan:
    """Gate one backfill, then count it (dry run) or enqueue it (``--write``)."""
    handle = registry.lookup(name)
    if row is None or not isinstance(handle, JobHandle) or not is_backfill(handle):
        raise BackfillUnknownError(
            f"no backfill named {shown(name)} is declared in this process. Fix: python manage.py jobs_backfill "
            "--pending lists the declared ones",
            {"backfill": shown(name)},
        )
    descriptor = declaration_of(handle).descriptor
    force = bool(ctx.options["force"])
    if row.state == "excluded":
        environment = jobs_settings().environment
        raise BackfillEnvironmentError(
            f"backfill {name!r} is excluded here: it runs in {list(descriptor.environments or ())}, and this "
            f"deployment is {environment!r} (ULTIMATE_JOBS['ENVIRONMENT']). Fix: run it where it belongs",
            {"backfill": name, "environment": environment, "state": "excluded"},
        )
    if descriptor.requires is not None:
        _check_applied(name, descriptor.requires)
    if row.state == "completed" and not force:
        raise BackfillAppliedError(
            f"backfill {name!r} already completed (run {row.run.run_id if row.run else '?'}). Fix: add --force "
            "to sweep it again into a new ledger row",
            {"backfill": name, "previous_run_id": row.run.run_id if row.run else None},
        )
    if not ctx.options["write"]:
        return BackfillPlan(name, row.state, "dry-run", count=_count(ctx, handle))
    enqueued = handle.enqueue(_input(ctx.options.get("input")) | ({"force": True} if force else {}))
    if force and enqueued.deduped:  # joined the live pass: the force cannot take effect until it ends
        raise BackfillRunningError(
            f"backfill {name!r} has a pass in flight (job {enqueued.id}); --force joined it instead of sweeping "
            f"again. Fix: wait for it to complete (python manage.py jobs_backfill --list --name {name}) or cancel "
            f"it (python manage.py jobs cancel {enqueued.id}), then run this again",
            {"backfill": name, "job_id": enqueued.id, "run_id": enqueued.run_id},
        )
    action: Action = "joined" if enqueued.deduped else "enqueued"
    return BackfillPlan(name, row.state, action, job_id=enqueued.id, run_id=enqueued.run_id)


def _input(text: str | None) -> dict[str, Any]:
    """``--input``: a JSON object of more input fields (``X_JOB_ARGUMENT_INVALID`` for anything else)."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise JobArgumentInvalidError(
            f'--input is not JSON ({exc}). Fix: pass an object, e.g. --input \'{{"org_id": "org-1"}}\'',
            {"flag": "--input"},
        ) from exc
    if not isinstance(value, dict):
        raise JobArgumentInvalidError(
            f"--input must be a JSON object of input fields, got {type(value).__name__}. Fix: --input "
            '\'{"org_id": "org-1"}\'',
            {"flag": "--input"},
        )
    if "force" in value:
        raise JobArgumentInvalidError("--input holds 'force'. Fix: pass --force instead", {"flag": "--input"})
    return value


def _check_applied(name: str, requires: str) -> None:
    """``requires`` ("app_label.migration_name") against Django's applied migrations of the jobs database."""
    app_label, _, migration = requires.partition(".")
    alias = job_driver().alias or DEFAULT_DB_ALIAS
    if (app_label, migration) not in MigrationRecorder(connections[alias]).applied_migrations():
        raise BackfillMigrationPendingError(
            f"backfill {name!r} requires the migration {requires}, which is not applied to the {alias!r} "
            "database. Fix: python manage.py migrate, then run this again",
            {"backfill": name, "requires": requires},
        )


def _count(ctx: Invocation, handle: JobHandle[Any, Any]) -> int | None:
    """``count(ctx)`` when the backfill declares one (``tenant="none"``: across every tenant), with a
    line on stderr while it counts; ``None`` when it declares none."""
    declaration = declaration_of(handle)
    counter = declaration.count
    if counter is None:
        return None
    ctx.note(f"counting the rows {handle.name} would sweep…")
    run_ctx = context_factory(jobs_settings().context)()
    if declaration.cross_tenant:
        return int(cross_tenant(f"jobs_backfill counts {handle.name}", lambda: counter(run_ctx)))
    return int(counter(run_ctx))


def _render_pending(environment: str, rows: list[BackfillStateRow], orphaned: list[str]) -> str:
    if not rows:
        out = "no backfills are declared."
    else:
        out = render.table(
            ["NAME", "STATE", "ROWS", "STARTED", "COMPLETED"],
            [
                [
                    r.name,
                    r.state,
                    r.run.rows_processed if r.run else None,
                    render.when(r.run.started_at_ms if r.run else None),
                    render.when(r.run.completed_at_ms if r.run else None),
                ]
                for r in rows
            ],
        )
    out += f"\n\nenvironment: {environment}"
    if orphaned:
        out += f"\norphaned (in the ledger, declared no more): {', '.join(orphaned)}"
    return out


def _render_ledger(rows: list[operator.BackfillRow]) -> str:
    if not rows:
        return "the backfill ledger is empty."
    return render.table(
        ["NAME", "TENANT", "STATUS", "ROWS", "PAGES", "CURSOR", "STARTED", "COMPLETED", "JOB", "DECLARED"],
        [
            [
                r.run.name,
                r.run.tenant_id,
                r.run.status,
                r.run.rows_processed,
                r.run.batches,
                r.run.last_cursor,
                render.when(r.run.started_at_ms),
                render.when(r.run.completed_at_ms),
                r.run.job_id,
                "yes" if r.declared else "no",
            ]
            for r in rows
        ],
    )


def _render_plans(plans: list[BackfillPlan]) -> str:
    return render.table(
        ["NAME", "STATE", "ACTION", "COUNT", "JOB", "ERROR"],
        [
            [
                p.name,
                p.state,
                p.action,
                p.count,
                p.job_id,
                f"{p.error['code']}: {p.error['message']}" if p.error else None,
            ]
            for p in plans
        ],
    )
