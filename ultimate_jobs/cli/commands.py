"""The subcommands of ``manage.py jobs``: each calls one operator function (``driver`` reads the settings)
and prints its record."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .. import operator
from ..conf import driver_resolution
from ..contracts.ordering import DEFAULT_JOB_ORDER
from ..errors import JobArgumentInvalidError, UltimateError
from . import render
from .parsing import EXIT_ERROR, EXIT_OK


class Output(Protocol):
    """Where the CLI writes: Django's ``OutputWrapper`` (``self.stdout`` / ``self.stderr``)."""

    def write(self, msg: str = "", style_func: Any = None, ending: str | None = None) -> None: ...

    def isatty(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a command: its parsed options and where it writes."""

    options: Mapping[str, Any]
    out: Output
    err: Output

    @property
    def json(self) -> bool:
        return bool(self.options.get("json"))

    def emit(self, data: dict[str, Any] | list[Any], human: str) -> None:
        self.out.write(render.to_json(data) if self.json else human)

    @property
    def quiet(self) -> bool:
        return self.json or self.options.get("verbosity", 1) == 0

    def note(self, text: str) -> None:
        """A remark for a person (stderr), silent under ``--json`` and ``-v 0``."""
        if not self.quiet:
            self.err.write(text)

    def progress(self, outcome: operator.BulkOutcome) -> None:
        """A bulk action's progress bar on stderr: redrawn in place on a terminal, a line per call
        otherwise (a log keeps every step); silent under ``--json`` and ``-v 0``."""
        if self.quiet:
            return
        line = render.progress_line(outcome)
        if self.err.isatty():
            self.err.write("\r" + line, ending="")
        else:
            self.err.write(line)

    def end_progress(self) -> None:
        if not self.quiet and self.err.isatty():
            self.err.write("")


def run(options: Mapping[str, Any], out: Output, err: Output) -> int:
    """Run the subcommand ``options["subcommand"]`` names; answers the exit code."""
    return guarded(_HANDLERS[options["subcommand"]], Invocation(options, out, err))


def guarded(handler: Callable[[Invocation], int | None], ctx: Invocation) -> int:
    """Run ``handler``; an operator error is printed (its code and fix, or ``{"error": ...}`` with
    ``--json``) and answers ``EXIT_ERROR``."""
    out, err = ctx.out, ctx.err
    try:
        code = handler(ctx)
    except UltimateError as error:
        if ctx.json:
            out.write(render.error_json(error))
        else:
            err.write(render.error_text(error))
        return EXIT_ERROR
    return EXIT_OK if code is None else code


def _filters(o: Mapping[str, Any]) -> dict[str, Any]:
    return {"state": o.get("state"), "queue": o.get("queue"), "name": o.get("name"), "tenant_id": o.get("tenant")}


def _list(ctx: Invocation) -> None:
    o = ctx.options
    page = operator.list_jobs(
        **_filters(o),
        id_prefix=o["id_prefix"],
        created_from_ms=o["created_from"],
        created_to_ms=o["created_to"],
        after=o["after"],
        before=o["before"],
        order=o["order"],
        **({"limit": o["limit"]} if o["limit"] is not None else {}),
    )
    counted = None
    if o["count"]:
        counted = operator.count_jobs(
            **_filters(o),
            id_prefix=o["id_prefix"],
            created_from_ms=o["created_from"],
            created_to_ms=o["created_to"],
            finished_only=o["order"].endswith("finished"),
        )
    flags = [("--queue", o["queue"]), ("--name", o["name"]), ("--state", o["state"]), ("--tenant", o["tenant"])]
    flags += [("--id-prefix", o["id_prefix"]), ("--created-from", o["created_from"])]
    flags += [("--created-to", o["created_to"]), ("--limit", o["limit"])]
    again = "".join(f" {flag} {value}" for flag, value in flags if value is not None)
    if o["order"] != DEFAULT_JOB_ORDER:
        again += f" --order={o['order']}"
    data = page.as_dict() | ({"count": counted.as_dict()} if counted is not None else {})
    ctx.emit(data, render.job_page(page, again, counted))


def _show(ctx: Invocation) -> None:
    detail = operator.inspect_job(operator.resolve_job_id(ctx.options["id"]))
    ctx.emit(detail.as_dict(), render.job_detail(detail))


def _action(call: Callable[[Mapping[str, Any]], operator.JobActionResult]) -> Callable[[Invocation], None]:
    def handler(ctx: Invocation) -> None:
        result = call(ctx.options)
        ctx.emit(result.as_dict(), render.job_action(result))

    return handler


def _bulk(call: Callable[..., operator.BulkOutcome]) -> Callable[[Invocation], None]:
    def handler(ctx: Invocation) -> None:
        drawn: list[operator.BulkOutcome] = []

        def progress(outcome: operator.BulkOutcome) -> None:
            drawn.append(outcome)
            ctx.progress(outcome)

        try:
            outcome = call(**_filters(ctx.options), until_done=True, on_progress=progress)
        finally:
            if drawn:
                ctx.end_progress()  # a refusal on a later call starts on a line of its own
        ctx.emit(outcome.as_dict(), render.bulk(outcome))

    return handler


def _pause(call: Callable[[str], operator.PauseState], key: str) -> Callable[[Invocation], None]:
    def handler(ctx: Invocation) -> None:
        state = call(ctx.options[key])
        if state.paused and not state.declared:
            ctx.note(f"note: this process declares no {state.kind} named {state.name!r}; the pause is kept anyway")
        ctx.emit(state.as_dict(), render.pause(state))

    return handler


def _workers(ctx: Invocation) -> None:
    rows = operator.inspect_workers()
    ctx.emit({"workers": [w.as_dict() for w in rows]}, render.workers(rows))


def _rates(ctx: Invocation) -> None:
    rows = operator.inspect_rates()
    ctx.emit({"rates": [r.as_dict() for r in rows]}, render.rates(rows))


def _queues(ctx: Invocation) -> None:
    rows = operator.inspect_queues()
    passes = operator.passes_in_flight()
    ctx.emit(
        {"queues": [q.as_dict() for q in rows], "backfills": [p.as_dict() for p in passes]},
        render.queues(rows) + render.passes_in_flight(passes),
    )


def _tasks(ctx: Invocation) -> None:
    rows = operator.inspect_tasks()
    ctx.emit({"tasks": [t.as_dict() for t in rows]}, render.tasks(rows))


def _manifest(ctx: Invocation) -> None:
    manifest = operator.inspect_manifest()
    path = ctx.options["write"]
    if path is None:
        ctx.emit(manifest.as_dict(), render.manifest(manifest))
        return
    written = operator.write_manifest(path, manifest)
    summary = f"{render.count(len(manifest.jobs), 'job')}, {render.count(len(manifest.tasks), 'task')}"
    ctx.emit(
        {"path": str(written), "jobs": len(manifest.jobs), "tasks": len(manifest.tasks)},
        f"wrote {written}: {summary}",
    )


def _outbox(ctx: Invocation) -> int | None:
    o = ctx.options
    if o["action"] == "list":
        if o["ids"]:
            raise JobArgumentInvalidError(
                "jobs outbox lists without ids; name ids after retry or remove", {"field": "ids"}
            )
        view = operator.inspect_outbox(limit=o["limit"])
        ctx.emit(view.as_dict(), render.outbox(view))
        return None
    act = operator.retry_outbox_rows if o["action"] == "retry" else operator.remove_outbox_rows
    result = act(o["ids"])
    ctx.emit(result.as_dict(), render.outbox_action(result))
    return EXIT_ERROR if result.missed else None  # some ids named no set-aside row: say so by the exit code


def _driver(ctx: Invocation) -> None:
    resolved = driver_resolution()
    ctx.emit(resolved.as_dict(), str(resolved))


def _stats(ctx: Invocation) -> None:
    o = ctx.options
    if o["window"] is not None:
        board = operator.inspect_dashboard(o["window"], job=o["job"])
        ctx.emit(board.as_dict(), render.dashboard(board))
        return
    if o["job"] is not None:
        raise JobArgumentInvalidError(
            "--job picks the series of one job: it goes with --window. Fix: jobs stats --window 1h --job NAME",
            {"argument": "job"},
        )
    view = operator.inspect_stats(since=o["since"])
    ctx.emit(view.as_dict(), render.stats(view, o["since"]))


_HANDLERS: dict[str, Callable[[Invocation], int | None]] = {
    "list": _list,
    "show": _show,
    "retry": _action(lambda o: operator.retry_job(operator.resolve_job_id(o["id"]), from_step=o["from_step"])),
    "cancel": _action(lambda o: operator.cancel_job(operator.resolve_job_id(o["id"]), o["reason"])),
    "remove": _action(lambda o: operator.remove_job(operator.resolve_job_id(o["id"]))),
    "promote": _action(lambda o: operator.promote_job(operator.resolve_job_id(o["id"]))),
    "requeue-many": _bulk(operator.requeue_many),
    "remove-many": _bulk(operator.remove_many),
    "promote-many": _bulk(operator.promote_many),
    "pause": _pause(operator.pause_queue, "queue"),
    "resume": _pause(operator.resume_queue, "queue"),
    "pause-task": _pause(operator.pause_task, "task"),
    "resume-task": _pause(operator.resume_task, "task"),
    "workers": _workers,
    "rates": _rates,
    "queues": _queues,
    "tasks": _tasks,
    "manifest": _manifest,
    "stats": _stats,
    "outbox": _outbox,
    "driver": _driver,
}
