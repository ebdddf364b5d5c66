"""Human output of ``manage.py jobs``: plain tables and key/value blocks, times in UTC."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import UltimateError
from ..operator import (
    BackfillRow,
    BulkOutcome,
    DashboardView,
    JobActionResult,
    JobCount,
    JobDetail,
    JobPageView,
    Manifest,
    OutboxActionResult,
    OutboxView,
    PauseState,
    QueueRow,
    RateRow,
    StatsView,
    TaskRow,
    WorkerRow,
)
from ..operator.dashboard import wait_text
from ..operator.records import progress_dict

NONE = "-"

FIXES = {
    "X_JOB_NOT_FOUND": "python manage.py jobs list --json",
    "X_JOB_NOT_REQUEUEABLE": "only a finished job can be retried: python manage.py jobs cancel {job_id} --json "
    "stops a live one",
    "X_JOB_NOT_CANCELLABLE": "the job is not live; python manage.py jobs show {job_id} --json says how it ended",
    "X_JOB_NOT_REMOVABLE": "python manage.py jobs cancel {job_id} --json",
    "X_JOB_NOT_PROMOTABLE": "only a delayed or backing-off job waits on its run time: "
    "python manage.py jobs show {job_id} --json",
    "X_JOB_PAGE_INVALID": "python manage.py jobs list --limit 200 --json",
    "X_JOB_DUPLICATE": "a live job holds the key; retry once it finishes: python manage.py jobs list --json",
    "X_NOT_IMPLEMENTED": "set ULTIMATE_JOBS['DRIVER'] to 'postgres' or 'memory' (a driver with an operator store)",
    "X_DRIVER_UNAVAILABLE": "check ULTIMATE_JOBS['DRIVER'] and the database it names",
}


def to_json(data: Any) -> str:
    """The ``--json`` text: two-space indent, keys in the record's own order."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def fix_for(error: UltimateError) -> str | None:
    """What to do next: the ``Fix:`` the message carries, else the code's entry in :data:`FIXES`."""
    _, found, embedded = error.message.partition("Fix: ")
    if found:
        return embedded.strip()
    template = FIXES.get(error.code)
    if template is None:
        return None
    return template.format(job_id=error.meta.get("job_id", "<id>"))


def error_json(error: UltimateError) -> str:
    """``{"error": {"code", "message", "meta", "fix"}}``."""
    return to_json({"error": {**error.as_dict(), "fix": fix_for(error)}})


def error_text(error: UltimateError) -> str:
    """``CODE: message``, then ``Fix: …`` on a line of its own."""
    message = error.message.partition(" Fix: ")[0].partition("Fix: ")[0].rstrip()
    fix = fix_for(error)
    return f"{error.code}: {message}" + (f"\nFix: {fix}" if fix else "")


def when(ms: int | None) -> str:
    """An epoch-ms instant as ``2026-01-31T09:30:00Z``."""
    if ms is None:
        return NONE
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def span(ms: int | None) -> str:
    """A duration in ms as ``250ms``, ``1.5s``, ``3m20s``."""
    if ms is None:
        return NONE
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    minutes, seconds = divmod(ms // 1000, 60)
    return f"{minutes}m{seconds:02d}s"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, two spaces apart; ``None`` prints as ``-``."""
    cells = [[NONE if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _block(pairs: Sequence[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {NONE if v is None else v}" for k, v in pairs)


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line if line else line for line in text.splitlines())


def _progress(progress: Any) -> str | None:
    data = progress_dict(progress)
    if data is None:
        return None
    total = f"/{data['total']:g}" if data["total"] is not None else ""
    note = f"  {data['note']}" if data["note"] else ""
    return f"{data['done']:g}{total}{note}  (at {when(data['at_ms'])})"


def job_page(page: JobPageView, filters: str, counted: JobCount | None = None) -> str:
    matched = f" ({counted.text()} match)" if counted is not None else ""
    if not page.rows:
        return f"no jobs match{' this page' if page.previous else ''}.{matched}"
    out = table(
        ["ID", "NAME", "QUEUE", "STATE", "ATTEMPT", "TENANT", "RUN AT", "CREATED", "FINISHED", "LAST ERROR"],
        [
            [
                r.id,
                r.name,
                r.queue,
                r.state,
                f"{r.attempts}/{r.max_attempts}",
                r.tenant_id,
                when(r.run_at_ms),
                when(r.created_at_ms),
                when(r.finished_at_ms) if r.finished_at_ms is not None else "-",
                _cut(r.last_error or r.last_code, 48),  # a coded error's first line starts with its code
            ]
            for r in page.rows
        ],
    )
    out += f"\n\n{count(len(page.rows), 'row')}{matched}, sorted by {page.order}."
    if page.window is not None:
        out += f"\nsorted among the newest {page.window:,} matching rows: narrow the filter to sort them all."
    ahead, back = ("older", "newer") if page.order == "-created" else ("next", "previous")
    if page.next:
        out += f"\n{ahead}:  python manage.py jobs list{filters} --after {page.next}"
    if page.previous:
        out += f"\n{back}:  python manage.py jobs list{filters} --before {page.previous}"
    return out


def job_detail(detail: JobDetail) -> str:
    j = detail.job
    worker = j.worker_id  # a running row's holder; after a settle, the worker of its last attempt
    if worker is not None:
        worker += f" (lease until {when(j.lease_until_ms)})" if j.state == "running" else " (the last attempt)"
    out = _block(
        [
            ("job", j.id),
            ("run", j.run_id),
            ("name", j.name),
            ("queue", j.queue),
            ("state", f"{j.state} (attempt {j.attempts} of {j.max_attempts})"),
            ("tenant", j.tenant_id),
            ("key", j.idempotency_key),
            ("priority", j.priority),
            ("run at", when(j.run_at_ms)),
            ("created", when(j.created_at_ms)),
            ("updated", when(j.updated_at_ms)),
            ("finished", when(j.finished_at_ms)),
            ("worker", worker),
            ("enqueued by", j.enqueued_by),
            ("concurrency", j.concurrency_key),
            ("traceparent", j.traceparent),
            ("progress", _progress(j.progress)),
            ("backfill", _backfill(detail.backfill)),
        ]
    )
    out += "\n\ninput (secrets redacted)\n" + _indent(to_json(j.input))
    if detail.steps:
        rows = [
            [s.seq, s.name, s.status, when(s.started_at_ms), span(s.duration_ms), _preview(s.output)]
            for s in detail.steps
        ]
        out += "\n\nsteps\n" + _indent(table(["SEQ", "NAME", "STATUS", "STARTED", "TOOK", "OUTPUT"], rows))
    else:
        out += "\n\nsteps\n  (none)"
    if detail.error is not None:
        out += f"\n\nerror\n  {detail.error.message}"
        if detail.error.stack:
            out += "\n" + _indent(detail.error.stack, "    ")
    return out


def _backfill(row: BackfillRow | None) -> str | None:
    if row is None:
        return None
    r = row.run
    done = f", completed {when(r.completed_at_ms)}" if r.completed_at_ms is not None else ""
    error = f", {r.error_code}" if r.error_code else ""
    return f"{r.status}: {r.rows_processed} rows in {r.batches} pages, cursor {to_json(r.last_cursor)}{done}{error}"


def _preview(value: Any, width: int = 60) -> str:
    cut = _cut(json.dumps(value, ensure_ascii=False, default=str), width)
    assert cut is not None
    return cut


def _cut(text: str | None, width: int) -> str | None:
    return text if text is None or len(text) <= width else text[: width - 1] + "…"


def job_action(result: JobActionResult) -> str:
    if result.action == "remove" or result.job is None:
        return f"removed {result.id}"
    j = result.job
    verb = {"retry": "retried", "cancel": "cancelled", "promote": "promoted"}[result.action]
    return f"{verb} {result.id} ({j.name}): {j.state} on queue {j.queue}, due {when(j.run_at_ms)}"


def bulk(outcome: BulkOutcome) -> str:
    over = ", ".join(f"{k}={v}" for k, v in outcome.filter.items())
    moved = count(outcome.affected, "row")
    return f"{outcome.action} [{over}]: {moved} in {count(outcome.calls, 'call')}; {outcome.remaining} remaining"


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def progress_line(outcome: BulkOutcome, width: int = 30) -> str:
    """``requeue-many [#########.....] 1000/1500`` — the rows moved so far of moved + remaining."""
    total = outcome.affected + outcome.remaining
    filled = width if total == 0 else width * outcome.affected // total
    return f"{outcome.action} [{'#' * filled}{'.' * (width - filled)}] {outcome.affected}/{total}"


def outbox(view: OutboxView) -> str:
    oldest = "" if view.oldest_pending_ms is None else f", the oldest staged at {when(view.oldest_pending_ms)}"
    head = f"{view.pending} waiting to publish{oldest}; {view.failed} set aside."
    if not view.rows:
        return head
    rows = [
        [r.id, r.name, r.queue, when(r.staged_at_ms), when(r.failed_at_ms), _cut((r.error or NONE).splitlines()[0], 80)]
        for r in view.rows
    ]
    shown = (
        "" if view.failed <= len(view.rows) else f"\n(the {len(view.rows)} oldest of {view.failed}; --limit for more)"
    )
    fix = "\nretry once the cause is fixed: jobs outbox retry <id> … — or drop for good: jobs outbox remove <id> …"
    return head + "\n" + table(["ID", "JOB", "QUEUE", "STAGED", "SET ASIDE", "ERROR"], rows) + shown + fix


def outbox_action(result: OutboxActionResult) -> str:
    did = "retried" if result.action == "retry" else "removed"
    named = ": " + ", ".join(result.landed) if result.landed else ""
    lines = [f"{did} {count(len(result.landed), 'set-aside row')}{named}"]
    if result.missed:
        lines.append(f"not set aside (pending, published or gone): {', '.join(result.missed)}")
    return "\n".join(lines)


def pause(state: PauseState) -> str:
    verb = "paused" if state.paused else "resumed"
    return f"{verb} {state.kind} {state.name}"


def queues(rows: Sequence[QueueRow]) -> str:
    if not rows:
        return "no queues."
    headers = ["QUEUE", "READY", "DELAYED", "RUNNING", "SUSPENDED", "DEAD"]
    return table(
        [*headers, "OLDEST DUE", "PAUSED"],
        [
            [
                q.queue,
                q.ready,
                q.delayed,
                q.running,
                q.suspended,
                q.dead,
                when(q.oldest_ready_ms),
                "yes" if q.paused else "",
            ]
            for q in rows
        ],
    )


def passes_in_flight(rows: Sequence[BackfillRow]) -> str:
    """The backfill passes running now, beside the queue depth (nothing when none is)."""
    if not rows:
        return ""
    listed = table(
        ["BACKFILL", "TENANT", "ROWS", "PAGES", "CURSOR", "STARTED", "JOB"],
        [
            [r.run.name, r.run.tenant_id, r.run.rows_processed, r.run.batches, to_json(r.run.last_cursor),
             when(r.run.started_at_ms), r.run.job_id]
            for r in rows
        ],
    )  # fmt: skip
    return "\n\nbackfill passes in flight\n" + _indent(listed)


def workers(rows: Sequence[WorkerRow]) -> str:
    if not rows:
        return "no live workers."
    return table(
        ["ID", "HOST", "PID", "QUEUES", "SLOTS", "IN FLIGHT", "STARTED", "HEARTBEAT"],
        [
            [
                w.id,
                w.host,
                w.pid,
                ",".join(w.queues),
                w.slots,
                len(w.in_flight),
                when(w.started_at_ms),
                when(w.heartbeat_at_ms),
            ]
            for w in rows
        ],
    )


def rates(rows: Sequence[RateRow]) -> str:
    if not rows:
        return "no rate limits: no job declares rate_limit=."
    return table(
        ["LIMIT", "RATE", "KEY", "NEXT START", "WAITING", "JOBS"],
        [
            [r.limit, r.rate or "(not declared)", r.key or NONE, when(r.next_at_ms), r.reserved, ",".join(r.jobs)]
            for r in rows
        ],
    )


def tasks(rows: Sequence[TaskRow]) -> str:
    if not rows:
        return "no tasks."
    lines = []
    for t in rows:
        d = t.descriptor
        cron, tz, catch_up = (d.cron, d.tz, d.catch_up) if d else ("(not declared)", None, None)
        jobs = ",".join(d.jobs) if d else None
        lines.append(
            [
                t.name,
                cron,
                tz,
                catch_up,
                jobs,
                "yes" if t.paused else "",
                when(t.last_occurrence_ms),
                when(t.next_run_ms),
            ]
        )
    return table(["TASK", "CRON", "TZ", "CATCH-UP", "JOBS", "PAUSED", "LAST FIRE", "NEXT FIRE"], lines)


def manifest(m: Manifest) -> str:
    jobs = table(
        ["JOB", "QUEUE", "TENANT", "ATTEMPTS", "TIMEOUT", "CONCURRENCY", "ORIGIN"],
        [
            [
                j.name,
                j.queue,
                j.tenant,
                j.retry.get("attempts"),
                span(j.timeout_ms),
                _concurrency(j.concurrency),
                j.origin,
            ]
            for j in m.jobs
        ],
    )
    out = jobs if m.jobs else "no jobs declared."
    if m.tasks:
        rows = [[t.name, t.cron, t.tz, t.catch_up, ",".join(t.jobs), t.origin] for t in m.tasks]
        out += "\n\n" + table(["TASK", "CRON", "TZ", "CATCH-UP", "JOBS", "ORIGIN"], rows)
    else:
        out += "\n\nno tasks declared."
    return out


def _concurrency(value: Any) -> str | None:
    if not value:
        return None
    keyed = " per key" if value.get("keyed") else ""
    return f"{value['limit']}{keyed} ({value['when_busy']})"


def stats(view: StatsView, window: str) -> str:
    head = f"settles since {when(view.since_ms)} ({window})"
    if not view.jobs:
        return f"{head}: none."
    rows = [[t.job, t.done, t.retried, t.failed, t.dead, span(t.mean_ms)] for t in (*view.jobs, view.total)]
    rows[-1][0] = "(all)"
    return head + "\n\n" + table(["JOB", "DONE", "RETRIED", "FAILED", "DEAD", "MEAN"], rows)


def dashboard(view: DashboardView) -> str:
    """The dashboard as text: the buckets anything settled in, the window's total, the queues' waits and
    sampled depth where they had any, the queues now and the attention strip."""
    of = f" of {view.job}" if view.job else ""
    head = f"settles{of} since {when(view.since_ms)} ({view.window}, buckets of {span(view.width_ms)})"
    busy = [p for p in view.points if p.settled]
    rows = [[when(p.at_ms), p.done, p.retried, p.failed, p.dead, _mean(p.mean_ms), wait_text(p.p95_ms)] for p in busy]
    t = view.total
    rows.append(["(window)", t.done, t.retried, t.failed, t.dead, _mean(t.mean_ms), wait_text(t.p95_ms)])
    headers = ["BUCKET", "DONE", "RETRIED", "FAILED", "DEAD", "MEAN", "P95"]
    settles = table(headers, rows) if busy else "none settled."
    attention = "\n".join(f"{'!' if a.count else ' '} {a.label}" for a in view.attention)
    started = [
        [q.queue, when(p.at_ms), p.started, wait_text(p.p50_ms), wait_text(p.p95_ms)]
        for q in view.waits
        for p in q.points
        if p.started
    ]
    waits = (
        "\n\nwaits, run time to start:\n" + table(["QUEUE", "BUCKET", "STARTED", "P50", "P95"], started)
        if started
        else ""
    )
    waiting = [
        [q.queue, when(p.at_ms), p.depth, span(p.oldest_age_ms)] for q in view.depths for p in q.points if p.depth
    ]
    depths = (
        "\n\njobs waiting, sampled:\n" + table(["QUEUE", "BUCKET", "WAITING", "OLDEST DUE"], waiting) if waiting else ""
    )
    return f"{head}\n\n{settles}{waits}{depths}\n\n{queues(view.queues)}\n\nneeds attention:\n{attention}"


def _mean(ms: float | None) -> str:
    return NONE if ms is None else span(round(ms))
