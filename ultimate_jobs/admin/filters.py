"""What the job lists take from the query string, and the filters they offer beside the table.

Every filter is an argument of ``operator.list_jobs``, so the lists show what ``manage.py jobs list``
shows on every driver with an operator store. No filter asks the driver for its choices (a ``SELECT
DISTINCT queue`` over millions of rows on every page load is the thing to avoid): states are the fixed
eight, queues come from the declarations, job names from the declarations and the rows the page shows (a
``django.tasks`` task has no ``@job`` in the web process: its name comes with its rows), and the tenant,
the idempotency key and the creation dates are typed in.

>>> query = parse_query(request.GET, state=None)
>>> operator.list_jobs(**query.arguments(), limit=50)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar
from urllib.parse import urlencode

from django.http import QueryDict
from django.utils import timezone

from ..contracts.jobs import JOB_STATES, JobState
from ..contracts.ordering import DEFAULT_JOB_ORDER, JobOrder, check_order
from ..core.clock import MAX_INSTANT_MS, MIN_INSTANT_MS
from ..errors import JobPageInvalidError
from ..operator.arguments import check_instant, check_state
from ..operator.queues import declared_job_names, declared_queues

SEARCH = "q"
STATE = "state__exact"  # the name the admin's state filter always had: the queues page links with it
TEXT_FILTERS = ("queue", "name", "tenant_id", "idempotency_key")
CREATED = ("created_from", "created_to")
DRILL_DOWN = ("created_at__year", "created_at__month", "created_at__day")
CURSORS = ("after", "before")
ORDER = "order"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def id_prefix(term: str) -> str | None:
    """The start of a job id's canonical text (lowercase, dashed) that ``term`` spells — hex digits, in
    either case, dashes optional — or ``None`` when no id starts with it."""
    digits = term.strip().lower().replace("-", "")
    if not digits or len(digits) > 32 or any(c not in "0123456789abcdef" for c in digits):
        return None
    parts = [digits[:8], digits[8:12], digits[12:16], digits[16:20], digits[20:]]
    return "-".join(p for p in parts if p)


@dataclass(frozen=True)
class ListQuery:
    """One list page's filters, checked: what the operator is asked, and how the page names them."""

    term: str = ""
    state: JobState | None = None
    queue: str | None = None
    name: str | None = None
    tenant_id: str | None = None
    idempotency_key: str | None = None
    id_prefix: str | None = None
    created_from_ms: int | None = None
    created_to_ms: int | None = None
    after: str | None = None
    before: str | None = None
    order: JobOrder = DEFAULT_JOB_ORDER
    empty: bool = False  # two filters no row can meet at once (a searched key and another typed one)
    params: dict[str, str] = field(default_factory=dict)  # the query string, as the page keeps it

    def filters(self) -> dict[str, Any]:
        """The filters ``operator.list_jobs`` and ``operator.count_jobs`` both take."""
        return {
            "state": self.state,
            "queue": self.queue,
            "name": self.name,
            "tenant_id": self.tenant_id,
            "idempotency_key": self.idempotency_key,
            "id_prefix": self.id_prefix,
            "created_from_ms": self.created_from_ms,
            "created_to_ms": self.created_to_ms,
        }

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``operator.list_jobs`` (every one but ``limit``)."""
        return {**self.filters(), "after": self.after, "before": self.before, "order": self.order}

    def count_arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``operator.count_jobs``: the list's filters, counted as its order lists
        them (sorted by finished, finished rows only)."""
        return {**self.filters(), "finished_only": self.order.endswith("finished")}

    @property
    def filtered(self) -> bool:
        """Whether any filter or search narrows the list (the page's fixed state and its order aside)."""
        return any(k not in CURSORS and k != ORDER for k in self.params)

    def bulk_filter(self, state: JobState | None) -> dict[str, Any] | None:
        """The filter of an ``operator.*_many`` call over every row this list matches, or ``None`` when a
        bulk filter cannot say it: no state, or a search, key or creation date (a bulk filter takes a
        state, a queue, a job name and a tenant only)."""
        state = state or self.state
        if state is None or self.empty or self.term or self.idempotency_key:
            return None
        if self.created_from_ms is not None or self.created_to_ms is not None:
            return None
        return {"state": state, "queue": self.queue, "name": self.name, "tenant_id": self.tenant_id}

    def url(self, **changes: str | None) -> str:
        """This page's query string with ``changes`` (``None`` drops a key); the cursors are dropped
        unless set, so a new filter starts at the newest page."""
        params = {k: v for k, v in self.params.items() if k not in CURSORS}
        for key, value in changes.items():
            if value is None:
                params.pop(key, None)
            else:
                params[key] = value
        return "?" + urlencode(params) if params else "?"


def parse_query(get: QueryDict, *, state: JobState | None) -> ListQuery:
    """The filters of a list's query string; ``state`` is the page's own (the dead letters'), which
    no parameter overrides. Text no filter can use is ``X_JOB_PAGE_INVALID`` (the caller answers 400):
    a state that is none of the eight, an instant that is none, a day that does not exist, both cursors, an
    order that is none of the list's.
    Unknown parameters are ignored."""
    known = (SEARCH, STATE, *TEXT_FILTERS, *CREATED, *DRILL_DOWN, *CURSORS, ORDER)
    params: dict[str, str] = {}
    for name in known:
        values = get.getlist(name)
        if values and str(values[-1]).strip():
            params[name] = str(values[-1])
    if state is not None:
        params.pop(STATE, None)
    text = {k: params.get(k) for k in TEXT_FILTERS}
    term = params.get(SEARCH, "").strip()
    prefix = id_prefix(term) if term else None
    key, empty = text["idempotency_key"], False
    if term and prefix is None:  # not an id: an exact idempotency key
        empty = key is not None and key != term
        key = term
    if "after" in params and "before" in params:
        raise JobPageInvalidError("pass after or before, never both", {"filter": "after"})
    start, end = created_range(params)
    return ListQuery(
        term=term,
        state=state or (check_state(params[STATE]) if STATE in params else None),
        queue=text["queue"],
        name=text["name"],
        tenant_id=text["tenant_id"].strip() if text["tenant_id"] else None,
        idempotency_key=key,
        id_prefix=prefix,
        created_from_ms=start,
        created_to_ms=end,
        after=params.get("after"),
        before=params.get("before"),
        order=check_order(params.get(ORDER, DEFAULT_JOB_ORDER)),
        empty=empty,
        params=params,
    )


def created_range(params: dict[str, str]) -> tuple[int | None, int | None]:
    """``[from, to)`` in epoch ms: the typed ``created_from``/``created_to`` (what ``jobs list
    --created-from/--created-to`` take) narrowed by a date drill-down (``created_at__year`` …, a
    year, month or day in the current time zone — the admin's links of old)."""
    start = check_instant(params["created_from"], what="created_from") if "created_from" in params else None
    end = check_instant(params["created_to"], what="created_to") if "created_to" in params else None
    drilled = drill_down(params)
    if drilled is not None:
        start = drilled[0] if start is None else max(start, drilled[0])
        end = drilled[1] if end is None else min(end, drilled[1])
    return start, end


def drill_down(params: dict[str, str]) -> tuple[int, int] | None:
    """The span of ``created_at__year`` (with ``__month``, ``__day``) in the current time zone, or
    ``None`` without a year. The parts are checked in range first (``_support.bad_dates``); a day the
    month does not have is ``X_JOB_PAGE_INVALID``."""
    year, month, day = (params.get(k) for k in DRILL_DOWN)
    if year is None:
        return None
    zone = timezone.get_current_timezone()
    try:
        if month is None:
            first = datetime(int(year), 1, 1, tzinfo=zone)
            after = first.replace(year=first.year + 1)
        elif day is None:
            first = datetime(int(year), int(month), 1, tzinfo=zone)
            after = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
        else:
            first = datetime(int(year), int(month), int(day), tzinfo=zone)
            after = first + timedelta(days=1)
    except ValueError:
        raise JobPageInvalidError(
            f"{year}-{month or 1}-{day or 1} is not a date; pick a day the month has", {"filter": DRILL_DOWN[2]}
        ) from None
    return _ms(first), _ms(after)


def _ms(at: datetime) -> int:
    """Epoch ms of ``at``, inside the instants a filter takes (year 1 in a zone east of UTC starts
    before the first one)."""
    return min(max((at - _EPOCH) // timedelta(milliseconds=1), MIN_INSTANT_MS), MAX_INSTANT_MS)


# -- the filters beside the table ----------------------------------------------------------------


@dataclass(frozen=True)
class ChoiceFilter:
    """A filter of links (All, then one per value), in the shape Django's ``{% admin_list_filter %}``
    reads of a ``ListFilter`` — ``template``, ``title``, ``choices(cl)`` — so Django's own
    ``admin/filter.html`` renders it, as the running Django version draws it."""

    title: str
    links: tuple[dict[str, Any], ...]  # each: display, query_string, selected (filter.html's names)
    template: ClassVar[str] = "admin/filter.html"

    def choices(self, changelist: object) -> list[dict[str, Any]]:
        """The links, as ``ListFilter.choices`` answers them."""
        return list(self.links)


@dataclass(frozen=True)
class TypedFilter:
    """A filter typed into boxes (a tenant, a key, dates): a small GET form in the filter panel, drawn by
    ``admin/ultimate_jobs/includes/typed_filter.html``. ``hidden`` are the other filters the form carries
    along; ``clear`` drops this one (and ``also``'s parameters) when it is set."""

    title: str
    inputs: tuple[dict[str, str], ...]  # each: name, value, placeholder
    hidden: tuple[tuple[str, str], ...]
    clear: str | None
    note: str | None = None
    template: ClassVar[str] = "admin/ultimate_jobs/includes/typed_filter.html"

    def choices(self, changelist: object) -> list[dict[str, Any]]:
        """None: the boxes are the choice."""
        return []


def sidebar(query: ListQuery, *, with_state: bool, shown_names: Iterable[str] = ()) -> list[ChoiceFilter | TypedFilter]:
    """The filters beside the table, in order: state (unless the page has its own), queue, job, tenant,
    idempotency key, created. The job filter offers every declared job and ``shown_names``, the names of
    the rows the page shows — a ``django.tasks`` task's rows carry a name no ``@job`` declares here."""
    found: list[ChoiceFilter | TypedFilter] = []
    if with_state:
        found.append(_choices(query, "state", STATE, list(JOB_STATES)))
    found.append(_choices(query, "queue", "queue", sorted(declared_queues())))
    jobs = sorted(declared_job_names() | set(shown_names))
    found.append(_choices(query, "job", "name", jobs))
    found.append(_typed(query, "tenant", [("tenant_id", "exact tenant id")]))
    found.append(_typed(query, "idempotency key", [("idempotency_key", "exact key")]))
    created = [("created_from", "from: 2026-01-31 or …T09:30Z"), ("created_to", "before: 2026-02-01")]
    drilled = "-".join(query.params[k].zfill(2) for k in DRILL_DOWN if k in query.params)
    note = f"in {drilled} ({timezone.get_current_timezone_name()})" if drilled else None
    found.append(_typed(query, "created", created, also=DRILL_DOWN, note=note))
    return found


def _choices(query: ListQuery, title: str, param: str, values: list[str]) -> ChoiceFilter:
    current = query.params.get(param)
    if current and current not in values:
        values = sorted([*values, current])  # a queue nothing declares now still shows as selected
    links = [{"display": "All", "query_string": query.url(**{param: None}), "selected": current is None}]
    links += [{"display": v, "query_string": query.url(**{param: v}), "selected": v == current} for v in values]
    return ChoiceFilter(title=title, links=tuple(links))


def _typed(
    query: ListQuery,
    title: str,
    fields: list[tuple[str, str]],
    *,
    also: tuple[str, ...] = (),
    note: str | None = None,
) -> TypedFilter:
    """A filter typed into boxes; ``also`` names parameters its clear link drops too."""
    names = [name for name, _ in fields]
    keep = tuple((k, v) for k, v in query.params.items() if k not in names and k not in CURSORS)
    inputs = tuple({"name": n, "value": query.params.get(n, ""), "placeholder": p} for n, p in fields)
    dropped = [*names, *also]
    active = any(k in query.params for k in dropped)
    clear = query.url(**dict.fromkeys(dropped)) if active else None
    return TypedFilter(title=title, inputs=inputs, hidden=keep, clear=clear, note=note)
