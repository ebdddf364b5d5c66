"""The bad-input set of the enqueue boundary: what a careless caller passes that no database can store.

Every way a request is built (``enqueue``, ``enqueue_as``, a router's ``enqueue_many``, the outbox's
stage, the scheduler's fire, a task's manual fire, ``django.tasks``, the factories) is attacked with
this one set, so a path that skips the admission check shows up as a row here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ultimate_jobs.guards.admission import MAX_JSON_DEPTH

NUL = "\u0000"


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"next": value}
    return value


def nul_key(value: Any) -> str:
    """An idempotency key function that turns the word NUL into the byte: a key built from clean input
    (a cron's, a template's) can still carry one."""
    return str(value.get("key", "k")).replace("NUL", NUL)


BAD_INPUTS: dict[str, tuple[dict[str, Any], str]] = {
    "a NUL byte in an input value": ({"note": f"a{NUL}b"}, "input.note"),
    "a NUL byte in an input key": ({f"k{NUL}": 1}, "a key of input"),
    "a lone surrogate in an input value": ({"note": "x\ud800y"}, "input.note"),
    "a NUL byte deep in a list": ({"items": [{"sku": f"x{NUL}"}]}, "input.items[0].sku"),
    "a NUL byte in the idempotency key": ({"key": "kNUL"}, "idempotency_key"),
    "input nested 1,000 deep": (nested(1_000), "nests deeper"),
    "input nested one level too deep": (nested(MAX_JSON_DEPTH + 1), "nests deeper"),
}
"""Bad inputs (to a job whose key is :func:`nul_key`): ``{why: (input, what the message names)}``."""

BAD_OPTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "a NUL byte in the queue": ({"queue": f"q{NUL}"}, "queue"),
    "a blank queue": ({"queue": ""}, "queue"),
    "a queue of spaces": ({"queue": "   "}, "queue"),
    "a run_id that is not a UUID": ({"run_id": "run-1"}, "run_id"),
    "run_at in nanoseconds": ({"run_at": 1_700_000_000_000_000_000}, "run_at"),
    "run_at of 10**20": ({"run_at": 10**20}, "run_at"),
    "run_at as text": ({"run_at": "tomorrow"}, "run_at"),
    "run_at as a bool": ({"run_at": True}, "run_at"),
    "a naive run_at": ({"run_at": datetime(2030, 1, 1)}, "run_at"),
    "delay of 10**30 ms": ({"delay": 10**30}, "delay"),
    "a negative int delay": ({"delay": -5000}, "delay"),
    "a negative text delay": ({"delay": "-5s"}, "delay"),
    "delay as nonsense": ({"delay": "soon"}, "delay"),
    "delay and run_at": ({"delay": "1s", "run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "delay"),
}
"""Bad enqueue options over a clean input: ``{why: (options, what the message names)}``."""

BAD_REQUESTS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    **{why: (value, {}, field) for why, (value, field) in BAD_INPUTS.items()},
    **{why: ({}, options, field) for why, (options, field) in BAD_OPTIONS.items()},
}
"""The whole set: ``{why: (input, options, what the message names)}``."""
