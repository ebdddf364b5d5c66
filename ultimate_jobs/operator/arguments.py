"""The operator's boundary: a job id, a queue, task or step name, or a cancel reason from outside (the CLI,
the admin, the JSON views) is checked here once, before any statement, so a malformed one is a coded
refusal on every surface and never a database error.

>>> check_job_id("0190A5C4-7E1B-7C3D-9F2E-3B4C5D6E7F80")
'0190a5c4-7e1b-7c3d-9f2e-3b4c5d6e7f80'
>>> check_name("", what="queue")
Traceback (most recent call last):
JobArgumentInvalidError: X_JOB_ARGUMENT_INVALID: the queue name is blank; …
"""

from __future__ import annotations

import re

from ..drivers.base import MAX_FILTER_CHARS, filter_text_problem
from ..errors import JobArgumentInvalidError, JobIdInvalidError

SHOWN_CHARS = 40
"""How much of a refused value a message quotes: enough to recognise it, never a megabyte echoed back."""

_JOB_ID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.IGNORECASE)
EXAMPLE_ID = "0190a5c4-7e1b-7c3d-9f2e-3b4c5d6e7f80"


def shown(value: object) -> str:
    """``value`` quoted for a message: its first :data:`SHOWN_CHARS` characters as a ``repr`` (a NUL
    byte prints as ``\\x00``), and how long it was when it was cut."""
    if not isinstance(value, str):
        return f"a {type(value).__name__}"
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}… ({len(value)} characters)"


def check_job_id(value: object) -> str:
    """``value`` as a job id's canonical text (lowercase, dashed), or ``X_JOB_ID_INVALID``.

    A job id is a UUID: 32 hex digits, dashed 8-4-4-4-12 or not, in either case. Anything else — a
    NUL byte, a path, a brace-wrapped or ``urn:`` form, 10,000 characters — can name no row.
    """
    if isinstance(value, str) and _JOB_ID.fullmatch(value):
        digits = value.replace("-", "").lower()
        return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
    raise JobIdInvalidError(
        f"{shown(value)} is not a job id; a job id is a UUID such as {EXAMPLE_ID}. "
        "Fix: copy the id from python manage.py jobs list --json",
        {"value": shown(value), "length": len(value) if isinstance(value, str) else None},
    )


def check_name(value: object, *, what: str) -> str:
    """``value`` unchanged when it can name a queue, task or step (``what``), or ``X_JOB_ARGUMENT_INVALID``:
    blank, a NUL byte, or longer than :data:`~ultimate_jobs.drivers.base.MAX_FILTER_CHARS`."""
    problem = "is blank" if isinstance(value, str) and not value.strip() else _text_problem(value)
    if problem is None:
        return str(value)
    fixes = {
        "queue": "python manage.py jobs queues",
        "task": "python manage.py jobs tasks",
        "step": "python manage.py jobs show <id> lists the run's steps",
    }
    fix = fixes.get(what, "check how the value was built")
    raise JobArgumentInvalidError(
        f"the {what} name {problem}. Fix: {fix}",
        {"argument": what, "value": shown(value), "max": MAX_FILTER_CHARS},
    )


def check_reason(value: object) -> str | None:
    """A cancel reason: ``None``, or text with no NUL byte and at most ``MAX_FILTER_CHARS`` characters
    (it is stored on the row as its last error), else ``X_JOB_ARGUMENT_INVALID``."""
    if value is None:
        return None
    problem = _text_problem(value)
    if problem is None:
        return str(value)
    raise JobArgumentInvalidError(
        f"the cancel reason {problem}. Fix: pass a short reason in plain text",
        {"argument": "reason", "value": shown(value), "max": MAX_FILTER_CHARS},
    )


def _text_problem(value: object) -> str | None:
    """Why ``value`` is no text a row can hold (:func:`filter_text_problem`, or not text at all)."""
    return filter_text_problem(value) if isinstance(value, str) else f"is {shown(value)}, not text"
