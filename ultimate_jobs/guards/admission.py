"""The enqueue boundary: what a request must be before any statement runs.

Every path that writes a job row — ``handle.enqueue()``, ``enqueue_as()``, a router's ``enqueue_many()``
(``django.tasks`` and the factories' enqueues go through it), the outbox's stage, and the scheduler's
fire (``TaskHandle.admit``) — passes :func:`check_request` first, so a request no driver can store is
refused at the caller with ``X_JOB_REQUEST_INVALID`` naming the field and the fix, and never reaches
the database: inside ``transaction.atomic()`` the caller's transaction is untouched, and the outbox
never holds a row its relay cannot publish. Inside a run the request must be for the run's org
(:mod:`ultimate_jobs.guards.org_boundary`). What a step stores passes :func:`check_json` the same way.

>>> check_request(charge.build_request({"order_id": "A-1"}))  # silent when the request can be stored
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..contracts.jobs import EnqueueRequest
from ..core.clock import MAX_INSTANT_MS, MIN_INSTANT_MS
from ..core.durations import parse_duration
from ..errors import InvariantError, JobRequestInvalidError, UltimateError
from .org_boundary import check_enqueue_org
from .sealing import ENVELOPE_KEY

MAX_JSON_DEPTH = 64
"""How deep a job's input or a step's output may nest (a dict or a list inside another is one level).
Deeper documents belong in a table or a file; the job carries their id."""

MAX_QUEUE_NAME_LENGTH = 200
"""The longest queue name (it is a label on every metric)."""

Refusal = Callable[[str, dict[str, Any]], UltimateError]

_SURROGATE = re.compile("[\ud800-\udfff]")


def check_request(request: EnqueueRequest) -> None:
    """Refuse a request no driver can store (``X_JOB_REQUEST_INVALID``): NUL bytes anywhere in its text
    (input values and keys, the queue, the idempotency, tenant and concurrency keys), input nested more
    than :data:`MAX_JSON_DEPTH` levels, a run_at outside years 1 to 9999, a run_id or id that is not a UUID,
    a blank or over-long queue name. Inside a run, a request for another org than the run's is
    ``X_TENANCY_ACTOR_MISMATCH`` (:func:`~ultimate_jobs.guards.org_boundary.check_enqueue_org`)."""
    job = request.name
    refuse = _refusal(job)
    check_text(request.queue, field="queue", refuse=refuse)
    if not request.queue.strip() or len(request.queue) > MAX_QUEUE_NAME_LENGTH:
        raise refuse(
            f"queue {request.queue[:40]!r} is not a queue name; pass a non-empty name of at most "
            f"{MAX_QUEUE_NAME_LENGTH} characters, or leave queue= out for the job's own",
            {"field": "queue"},
        )
    for field, value in (
        ("idempotency_key", request.idempotency_key),
        ("tenant", request.tenant_id),
        ("concurrency_key", request.concurrency_key),
        ("enqueued_by", request.enqueued_by),
    ):
        if value is not None:
            check_text(value, field=field, refuse=refuse)
    for field, value in (("run_id", request.run_id), ("id", request.id)):
        if value is not None and not _is_uuid(value):
            raise refuse(
                f"{field} {str(value)[:40]!r} is not a UUID; leave it out (one is allocated) or pass a UUID string",
                {"field": field},
            )
    if request.run_at_ms is not None:
        check_instant(request.run_at_ms, field="run_at", refuse=refuse)
    if not request.input_checked:
        check_json(request.input, field="input", refuse=refuse)
    check_enqueue_org(request.tenant_id, job=job)


def scheduled_ms(delay: object, run_at: object, *, now: Callable[[], int], job: str) -> int | None:
    """When a request becomes due: ``run_at`` (an aware datetime or epoch milliseconds) or ``delay`` (a
    duration of 0 or more) from ``now()``, or ``None`` for at once. Anything else is refused."""
    refuse = _refusal(job)
    if delay is not None and run_at is not None:
        raise refuse("pass delay= or run_at=, not both", {"field": "delay"})
    if delay is not None:
        try:
            delay_ms = parse_duration(delay, field="delay")
        except UltimateError as exc:
            raise refuse(exc.message, {"field": "delay"}) from exc
        if delay_ms < 0:
            raise refuse(
                f"delay is negative ({delay_ms} ms); pass a delay of 0 or more, or run_at= for an instant",
                {"field": "delay"},
            )
        ms = now() + delay_ms
        check_instant(ms, field="delay", refuse=refuse)
        return ms
    if run_at is None:
        return None
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None:
            raise refuse("run_at is a naive datetime; pass an aware one (tzinfo set)", {"field": "run_at"})
        ms = int(run_at.timestamp() * 1000)
    elif isinstance(run_at, int) and not isinstance(run_at, bool):
        ms = run_at
    else:
        raise refuse(
            f"run_at is {type(run_at).__name__} {str(run_at)[:40]!r}; pass an aware datetime or epoch milliseconds "
            "(an int), or delay= for a duration",
            {"field": "run_at"},
        )
    check_instant(ms, field="run_at", refuse=refuse)
    return ms


def check_input(value: Any, *, job: str) -> None:
    """:func:`check_json` over a job's raw input, before anything parses or copies it."""
    check_json(value, field="input", refuse=_refusal(job))


def check_instant(ms: int, *, field: str, refuse: Refusal) -> None:
    """Refuse an instant outside years 1 to 9999 (what Python's datetime and every driver can hold)."""
    if not MIN_INSTANT_MS <= ms <= MAX_INSTANT_MS:
        raise refuse(
            f"{field} lands at {ms} ms since the epoch, outside years 1 to 9999; pass epoch MILLISECONDS (not "
            "seconds or nanoseconds) or an aware datetime",
            {"field": field},
        )


def check_text(value: str, *, field: str, refuse: Refusal) -> None:
    """Refuse text no database text column can hold: a NUL byte, or a lone surrogate (not UTF-8)."""
    if _storable(value):
        return
    if "\x00" in value:
        raise refuse(
            f"{field} contains a NUL byte (\\u0000), which no database text can hold; strip it before enqueueing",
            {"field": field},
        )
    if _SURROGATE.search(value):
        raise refuse(
            f"{field} holds a lone surrogate (half of a UTF-16 pair), which is not text any database can store; "
            "decode the bytes it came from as UTF-8",
            {"field": field},
        )


def _storable(text: str) -> bool:
    """Whether every database text column can hold ``text``: no NUL byte, no lone surrogate (ASCII, the
    common case, holds none, so it needs no pattern search)."""
    return "\x00" not in text and (text.isascii() or _SURROGATE.search(text) is None)


def clean_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON every input check passes — dicts with text keys, lists and tuples,
    text, ints, finite floats, booleans and ``None``; no NUL byte or lone surrogate in any text, no container
    nested :data:`MAX_JSON_DEPTH` levels deep, no key :data:`~ultimate_jobs.guards.sealing.ENVELOPE_KEY` — in
    one walk. ``False`` says only "not proven": the full checks (:func:`check_json`, ``refuse_reserved``, the
    strict JSON encode) then run and name what is wrong, or find it storable after all (an ``int`` subclass,
    a key that is a number)."""
    return _clean(value, 0)


def _clean(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind is str:
        return _storable(value)
    if kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth >= MAX_JSON_DEPTH:
        return False
    if kind is dict:
        if ENVELOPE_KEY in value:
            return False
        for key, child in value.items():
            if type(key) is not str or not _storable(key):
                return False
            if not _clean(child, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        return all(_clean(child, depth + 1) for child in value)
    return False


def check_json(value: Any, *, field: str, refuse: Refusal) -> None:
    """Refuse a JSON value nested deeper than :data:`MAX_JSON_DEPTH` or holding a NUL byte in a string or a
    key. Walked without recursion, so a 10,000-deep value is refused, not a ``RecursionError``."""
    stack: list[tuple[Any, int, str]] = [(value, 0, field)]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            check_text(item, field=path, refuse=refuse)
            continue
        if not isinstance(item, dict | list | tuple):
            continue
        if depth >= MAX_JSON_DEPTH:
            raise refuse(
                f"{path} nests deeper than {MAX_JSON_DEPTH} levels; keep the document in a table or a file and "
                "pass its id",
                {"field": field, "max_depth": MAX_JSON_DEPTH},
            )
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    check_text(key, field=f"a key of {path}", refuse=refuse)
                stack.append((child, depth + 1, f"{path}.{str(key)[:40]}"))
        else:
            stack.extend((child, depth + 1, f"{path}[{i}]") for i, child in enumerate(item))


MAX_PROGRESS_NOTE_LENGTH = 1_000
"""The longest progress note (it is shown on every operator surface; a log belongs in a log)."""


def check_progress(done: object, total: object, note: object) -> None:
    """Refuse a ``run.progress(done, total, note)`` no surface can store or show (``X_INVARIANT``, at the
    call, in the body): ``done``/``total`` that are not finite numbers, a note that is not text, holds a
    NUL byte or passes :data:`MAX_PROGRESS_NOTE_LENGTH` characters."""
    for field, value in (("done", done), ("total", total)):
        if value is None and field == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InvariantError(
                f"run.progress: {field}={str(value)[:40]!r}; pass a finite number (total may be None)",
                {"field": field},
            )
    if note is None:
        return
    if not isinstance(note, str) or len(note) > MAX_PROGRESS_NOTE_LENGTH:
        raise InvariantError(
            f"run.progress: the note must be text of at most {MAX_PROGRESS_NOTE_LENGTH} characters",
            {"field": "note"},
        )
    check_text(note, field="run.progress: the note", refuse=lambda message, meta: InvariantError(message, meta))


def _refusal(job: str) -> Refusal:
    def refuse(message: str, meta: dict[str, Any]) -> UltimateError:
        return JobRequestInvalidError(f"{job}: {message}", {"job": job, **meta})

    return refuse


def _is_uuid(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
