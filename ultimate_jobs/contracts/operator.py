"""The operator's records: a job as the lists show it, the filters and pages that select it, bulk
actions, the worker registry, and the checks every driver's operator store shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.clock import MAX_INSTANT_MS, MIN_INSTANT_MS
from ..errors import InvariantError, JobRowStatusUnknownError
from .jobs import FINISHED_STATES, JOB_STATES, JobState, Progress
from .ordering import DEFAULT_JOB_ORDER, JobOrder, check_order

MAX_JOB_PAGE = 200
DEFAULT_JOB_PAGE = 100
MAX_BULK_ROWS = 1_000
MAX_WORKER_IN_FLIGHT = 100


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Per-queue depth, as metrics and ``jobs queues`` read it: the rows of each live state and the
    dead-letter queue (``dead``). Rows done, failed or cancelled are history, not depth, and are not
    counted — reading them would slow every scrape as history grows; the settle counters say how many
    jobs finished (``driver.operator.counter_totals``)."""

    queue: str
    ready: int = 0
    delayed: int = 0
    running: int = 0
    suspended: int = 0
    dead: int = 0
    oldest_ready_ms: int | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job row as the operator surface sees it."""

    id: str
    run_id: str
    name: str
    queue: str
    state: JobState
    tenant_id: str | None
    idempotency_key: str
    attempts: int
    max_attempts: int
    priority: int
    run_at_ms: int
    created_at_ms: int
    updated_at_ms: int
    input: Mapping[str, Any]
    last_error: str | None = None
    last_code: str | None = None
    finished_at_ms: int | None = None
    worker_id: str | None = None
    lease_until_ms: int | None = None
    progress: Progress | None = None
    enqueued_by: str | None = None
    traceparent: str | None = None
    concurrency_key: str | None = None

    def __post_init__(self) -> None:
        # Every driver decodes its rows into this record (get, list, the operator's answers): a state this
        # version does not know is refused here, once for all drivers, rather than shown as if valid.
        if self.state in JOB_STATES:
            return
        raise JobRowStatusUnknownError(
            f"job {self.id} is stored in state {str(self.state)[:40]!r}, which this version of ultimate_jobs does "
            f"not know (it knows {', '.join(JOB_STATES)}): a newer version wrote it, or the row was edited by hand. "
            "Read it with the version that wrote it, or set its state to one of these",
            {"job_id": self.id, "state": str(self.state)[:40], "known": list(JOB_STATES)},
        )


@dataclass(frozen=True, slots=True)
class JobFilter:
    """``list()``'s filter and page, sorted by ``order`` (newest first by default; see
    :mod:`.ordering`); ``after``/``before`` are cursors from :func:`job_cursor` of a row in that order.
    ``id_prefix`` and ``id_suffix`` are the start and the end of an id's canonical text (lowercase, dashed
    8-4-4-4-12); text no id starts or ends with matches no row. A prefix rides the primary key; no index
    serves a suffix, so a driver reads every row (a short id's lookup, ``jobs show 3b4c5d6e7f80``)."""

    queue: str | None = None
    name: str | None = None
    state: JobState | None = None
    tenant_id: str | None = None
    id_prefix: str | None = None
    id_suffix: str | None = None
    idempotency_key: str | None = None
    created_from_ms: int | None = None
    created_to_ms: int | None = None
    limit: int = DEFAULT_JOB_PAGE
    after: str | None = None
    before: str | None = None
    order: JobOrder = DEFAULT_JOB_ORDER

    def __post_init__(self) -> None:
        check_filter_text(
            self, ("queue", "name", "tenant_id", "id_prefix", "id_suffix", "idempotency_key", "after", "before")
        )
        check_instants(self, ("created_from_ms", "created_to_ms"))
        check_order(self.order)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of rows in the filter's order. A page shorter than its limit is the last. ``window`` is set
    when the rows were sorted within a window — the ``window`` newest rows the filter matches — and more
    rows match than it holds (see :mod:`.ordering`); ``None`` when the order covers every matching row."""

    rows: tuple[JobRecord, ...]
    limit: int
    window: int | None = None

    @property
    def is_last(self) -> bool:
        """True when no older page exists."""
        return len(self.rows) < self.limit


@dataclass(frozen=True, slots=True)
class BulkFilter:
    """The set a bulk operation works over."""

    state: JobState
    queue: str | None = None
    name: str | None = None
    tenant_id: str | None = None

    def __post_init__(self) -> None:
        check_filter_text(self, ("queue", "name", "tenant_id"))


# The longest text a list or bulk filter takes: longer names no row, and an attacker's megabyte of
# filter text should not reach the database.
MAX_FILTER_CHARS = 500


def filter_text_problem(value: str) -> str | None:
    """Why ``value`` can be no filter — a NUL byte (Postgres text cannot store one, and the driver would
    answer a DataError), a lone surrogate (no UTF-8 encodes it) or more than MAX_FILTER_CHARS — or
    ``None`` when it can."""
    if "\x00" in value:
        return "contains a NUL byte; no job has one — check how the value was built"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: bytes that were no UTF-8 on the command line
            return "is not valid UTF-8 text; no job has it — check how the value was built"
    if len(value) > MAX_FILTER_CHARS:
        return f"is {len(value)} characters; at most {MAX_FILTER_CHARS} are taken"
    return None


def check_instants(flt: object, fields: Sequence[str]) -> None:
    """Refuse an instant outside :data:`MIN_INSTANT_MS`..:data:`MAX_INSTANT_MS` (no row was created then,
    and Postgres cannot compare with it) with ``X_JOB_PAGE_INVALID``, before any statement runs."""
    from ..errors import JobPageInvalidError

    for name in fields:
        value = getattr(flt, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not MIN_INSTANT_MS <= value <= MAX_INSTANT_MS:
            raise JobPageInvalidError(
                f"{name}={value!r} is no instant in 0001-01-01..9999-12-31 (epoch ms "
                f"{MIN_INSTANT_MS}..{MAX_INSTANT_MS})",
                {"field": name},
            )


def check_filter_text(flt: object, fields: Sequence[str]) -> None:
    """Refuse a filter whose text no row can hold (:func:`filter_text_problem`) with
    ``X_JOB_PAGE_INVALID``, before any statement runs."""
    from ..errors import JobPageInvalidError

    for name in fields:
        value = getattr(flt, name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise JobPageInvalidError(f"{name} must be text, got {type(value).__name__}", {"field": name})
        problem = filter_text_problem(value)
        if problem is not None:
            raise JobPageInvalidError(f"{name} {problem}", {"field": name, "max": MAX_FILTER_CHARS})


@dataclass(frozen=True, slots=True)
class BulkResult:
    """Rows moved by this call, and what a second call could still move — "call until zero" ends."""

    affected: int
    remaining: int


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker's registry row."""

    id: str
    host: str
    pid: int
    started_at_ms: int
    queues: tuple[str, ...]
    slots: int
    in_flight: tuple[str, ...]
    heartbeat_at_ms: int


def check_page(flt: JobFilter) -> None:
    """Refuse a limit over :data:`MAX_JOB_PAGE` (or below 1) and a filter carrying both cursors."""
    from ..errors import JobPageInvalidError

    if isinstance(flt.limit, bool) or not isinstance(flt.limit, int) or not 1 <= flt.limit <= MAX_JOB_PAGE:
        raise JobPageInvalidError(
            f"limit {flt.limit!r} is outside 1..{MAX_JOB_PAGE}. Fix: python manage.py jobs list --limit 200 --json",
            {"limit": flt.limit},
        )
    if flt.after is not None and flt.before is not None:
        raise JobPageInvalidError("pass filter.after or filter.before, never both", {"cursor": "after"})


def finished_cutoffs(before_ms: Mapping[JobState, int], limit: int) -> dict[JobState, int]:
    """``before_ms`` checked: finished states only (``X_INVARIANT`` on a live one — retention never deletes
    work still to do), each an int instant, and ``limit`` at least 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvariantError(f"purge_finished: limit must be an int >= 1, got {limit!r}", {"limit": limit})
    cutoffs: dict[JobState, int] = {}
    for state, instant in before_ms.items():
        if state not in FINISHED_STATES:
            raise InvariantError(
                f"purge_finished: {state!r} is not a finished state; retention deletes only {FINISHED_STATES}",
                {"state": state},
            )
        if isinstance(instant, bool) or not isinstance(instant, int):
            raise InvariantError(f"purge_finished: the {state} cutoff must be epoch ms, got {instant!r}", {})
        cutoffs[state] = instant
    return cutoffs
