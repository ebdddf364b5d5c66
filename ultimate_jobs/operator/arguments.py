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
from datetime import UTC, date, datetime, timedelta

from ..contracts.jobs import JOB_STATES, JobState
from ..contracts.operator import MAX_FILTER_CHARS, filter_text_problem
from ..core.clock import MAX_INSTANT_MS, MIN_INSTANT_MS
from ..errors import JobArgumentInvalidError, JobIdInvalidError, JobPageInvalidError

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
    blank, a NUL byte, or longer than :data:`~ultimate_jobs.contracts.operator.MAX_FILTER_CHARS`."""
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


def check_state(value: object) -> JobState:
    """``value`` when it is one of the eight job states, else ``X_JOB_PAGE_INVALID`` (a list filter)."""
    for state in JOB_STATES:
        if value == state:
            return state
    raise JobPageInvalidError(
        f"state {shown(value)} is not a job state; one of {', '.join(JOB_STATES)}", {"filter": "state"}
    )


_EPOCH_MS = re.compile(r"-?[0-9]+")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_instant(value: str, *, what: str = "instant") -> int:
    """Epoch milliseconds from text — epoch ms, an ISO date (midnight UTC) or an ISO datetime (UTC unless
    it names an offset) between 0001-01-01 and 9999-12-31 — or ``X_JOB_PAGE_INVALID`` naming ``what``
    (the filter it was given for). What ``jobs list --created-from`` and the list views take.

    >>> check_instant("2026-01-31")
    1769817600000
    """
    text = value.strip()
    try:
        if _EPOCH_MS.fullmatch(text):
            ms = int(text)
        else:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00")) if "T" in text or " " in text else None
            if parsed is None:
                day = date.fromisoformat(text)
                parsed = datetime(day.year, day.month, day.day)
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            ms = (parsed - _EPOCH) // timedelta(milliseconds=1)
    except (ValueError, OverflowError):  # not an instant, or an int of more digits than Python reads
        raise JobPageInvalidError(
            f"{shown(value)} is not an instant; write 2026-01-31, 2026-01-31T09:30:00Z or epoch milliseconds",
            {"filter": what},
        ) from None
    if not MIN_INSTANT_MS <= ms <= MAX_INSTANT_MS:
        raise JobPageInvalidError(
            f"{shown(value)} is outside 0001-01-01..9999-12-31 (epoch ms {MIN_INSTANT_MS}..{MAX_INSTANT_MS})",
            {"filter": what},
        )
    return ms
