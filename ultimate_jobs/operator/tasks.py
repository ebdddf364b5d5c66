"""The operator surface over declarations: tasks (pauses, last fire, next fire) and the manifest."""

from __future__ import annotations

import json
from pathlib import Path

from ..contracts.protocol import JobDriver
from ..core import registry
from ..core.definition import JobHandle
from ..core.installed import job_clock
from ..errors import JobArgumentInvalidError
from ..guards.org_boundary import refuse_fleet_view
from ..scheduler.task import TaskHandle, next_task_run
from ._support import require_operator, resolve
from .arguments import check_name, shown
from .records import Manifest, PauseState, TaskRow

MANIFEST_FILE = "x.manifest.json"


def declared_tasks() -> dict[str, TaskHandle]:
    """Every task this process declares, by name."""
    return {h.name: h for h in registry.registered("task") if isinstance(h, TaskHandle)}


def inspect_tasks(*, driver: JobDriver | None = None) -> list[TaskRow]:
    """Every declared task — plus any name a pause or a fire left behind that nothing declares now —
    with whether it is paused, its last dispatched occurrence, and its next one (computed by the
    scheduler's own resolver; ``None`` for an undeclared name).

    >>> [(t.name, t.paused, t.next_run_ms) for t in inspect_tasks()]
    """
    refuse_fleet_view("inspect_tasks")
    surface = require_operator(resolve(driver), "tasks")
    declared = declared_tasks()
    paused = set(surface.paused_tasks())
    fires = {f.task: f for f in surface.task_fires()}
    now = job_clock().now_ms()
    rows: list[TaskRow] = []
    for name in sorted(set(declared) | paused | set(fires)):
        handle = declared.get(name)
        fire = fires.get(name)
        rows.append(
            TaskRow(
                name=name,
                descriptor=handle.describe() if handle else None,
                paused=name in paused,
                last_occurrence_ms=fire.occurrence_ms if fire else None,
                last_fired_at_ms=fire.fired_at_ms if fire else None,
                next_run_ms=next_task_run(handle, now) if handle else None,
            )
        )
    return rows


def pause_task(task: str, *, driver: JobDriver | None = None) -> PauseState:
    """Stop dispatching ``task``; on resume its own catch-up policy decides what it missed.

    >>> pause_task("nightly_digest")

    A blank name, a NUL byte or over 500 characters is ``X_JOB_ARGUMENT_INVALID`` (so for resume).
    """
    refuse_fleet_view("pause_task")
    task = check_name(task, what="task")
    require_operator(resolve(driver), "pause-task").pause_task(task)
    return PauseState(kind="task", name=task, paused=True, declared=task in declared_tasks())


def resume_task(task: str, *, driver: JobDriver | None = None) -> PauseState:
    """Dispatch ``task`` again (resuming a task that is not paused is a no-op).

    >>> resume_task("nightly_digest")
    """
    refuse_fleet_view("resume_task")
    task = check_name(task, what="task")
    require_operator(resolve(driver), "resume-task").resume_task(task)
    return PauseState(kind="task", name=task, paused=False, declared=task in declared_tasks())


def inspect_manifest() -> Manifest:
    """Every declared job and task, sorted by name — declarations only, no database read.

    >>> [j.name for j in inspect_manifest().jobs]
    """
    jobs = tuple(h.describe() for h in registry.registered("job") if isinstance(h, JobHandle))
    tasks = tuple(h.describe() for h in declared_tasks().values())
    return Manifest(jobs=tuple(sorted(jobs, key=lambda d: d.name)), tasks=tuple(sorted(tasks, key=lambda d: d.name)))


def manifest_json(manifest: Manifest | None = None) -> str:
    """The manifest as stable text: keys sorted, two-space indent, one trailing newline — the same
    declarations always write the same bytes, so the file diffs cleanly in review."""
    data = (manifest or inspect_manifest()).as_dict()
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_manifest(path: str | Path = MANIFEST_FILE, manifest: Manifest | None = None) -> Path:
    """Write :func:`manifest_json` to ``path`` (``x.manifest.json`` by default); answers the path.

    >>> write_manifest()
    PosixPath('x.manifest.json')

    A path that cannot be written — a missing directory, a directory, no permission, a NUL byte — is
    ``X_JOB_ARGUMENT_INVALID``.
    """
    text = manifest_json(manifest)
    target = Path(path)
    try:
        target.write_text(text, encoding="utf-8")
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise JobArgumentInvalidError(
            f"cannot write the manifest to {shown(str(path))}: {why}. Fix: name a file in a directory that "
            f"exists and this user may write, e.g. --write {MANIFEST_FILE}",
            {"argument": "path", "value": shown(str(path))},
        ) from exc
    return target
