"""Which job an operator means by the id text they typed: a whole id, the start of one
(``01a23394-407b``), or its short form — the end of one, as the console prints it (``3b4c5d6e7f80``,
:func:`~ultimate_jobs.core.ids.short_id`).

Ids are UUIDv7: every job enqueued near one instant shares the start, so a short start names several jobs,
while the random end names one in practice, as a shortened hash does in git.

>>> resolve_job_id("3b4c5d6e7f80")
'01a23394-407b-72a5-9f2e-3b4c5d6e7f80'
"""

from __future__ import annotations

from ..contracts.protocol import JobDriver
from ..core.ids import SHORT_ID_CHARS, ends_an_id, starts_an_id
from ..errors import JobIdAmbiguousError, JobIdInvalidError, JobNotFoundError
from .arguments import check_job_id
from .jobs import list_jobs
from .records import JobRow

MIN_ID_PART = 4
"""The fewest characters of an id a lookup takes (fewer would match most rows)."""
SHOWN_MATCHES = 5
"""How many of the jobs an ambiguous part matches the refusal names."""


def resolve_job_id(value: str, *, driver: JobDriver | None = None) -> str:
    """The job id ``value`` names: ``value`` itself when it is a whole id (``X_JOB_ID_INVALID`` when it is
    no id and no part of one), else the one job whose id starts or ends with it — in either case, dashes
    where the id has them. ``X_JOB_ID_AMBIGUOUS`` names the matches (newest first) when several do,
    ``X_JOB_NOT_FOUND`` says when none does.

    A start rides the primary key; an end is matched by reading every row (no index serves it), which on a
    store of millions of rows takes a moment — fine for an operator's lookup, not for a loop.
    """
    try:
        return check_job_id(value)
    except JobIdInvalidError:
        part = value.lower() if isinstance(value, str) else ""
        starts, ends = starts_an_id(part), ends_an_id(part)
        if len(part) < MIN_ID_PART or not (starts or ends):
            raise
    found: dict[str, JobRow] = {}
    for wanted, prefix, suffix in ((starts, part, None), (ends, None, part)):
        if wanted:  # one more than is shown: whether there are more to say
            rows = list_jobs(id_prefix=prefix, id_suffix=suffix, limit=SHOWN_MATCHES + 1, driver=driver).rows
            found.update((row.id, row) for row in rows)
    matches = sorted(found.values(), key=lambda r: (r.created_at_ms, r.id), reverse=True)
    if not matches:
        how = "starts or ends" if starts and ends else "starts" if starts else "ends"
        raise JobNotFoundError(
            f"no job id {how} with {part!r}. Fix: python manage.py jobs list --json lists the newest jobs",
            {"value": part},
        )
    if len(matches) > 1:
        shown = matches[:SHOWN_MATCHES]
        listed = ", ".join(f"{r.id} ({r.name}, {r.state})" for r in shown)
        extra = " and more" if len(matches) > SHOWN_MATCHES else ""
        raise JobIdAmbiguousError(
            f"{part!r} names {len(shown)} jobs{extra}: {listed}. Fix: give more of the id — its last "
            f"{SHORT_ID_CHARS} characters, as the console prints them, or the whole id",
            {"value": part, "matches": [r.id for r in shown]},
        )
    return matches[0].id
