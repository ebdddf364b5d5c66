"""``backfill()``: one pass over every row a QuerySet matches, declared as a job.

A backfill is a factory over :func:`~ultimate_jobs.job`, not a primitive of its own: its pass has the
job's retry policy, queue, cancellation and dead-letter path. The source is read in keyset pages over
the primary key (``pk > cursor ORDER BY pk LIMIT batch``, never ``OFFSET``), each page inside its own
``step.run`` named ``batch:0``, ``batch:1``, … whose stored output is the cursor and the counts, never the
rows — so an attempt killed mid-pass resumes on the page it stopped at. The ``x_backfills`` ledger
(``driver.backfills``) records one row per pass; a completed row makes a later run answer ``skipped``.

>>> rewrite_slugs = backfill(
...     name="rewrite-slugs",
...     tenant="none",
...     source=lambda ctx: Post.objects.filter(published=True),
...     handle=lambda rows, signal: Post.objects.bulk_update([slugged(p) for p in rows], ["slug"]),
... )
>>> rewrite_slugs.enqueue()
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import math
import os
import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
from django.db import transaction

from ..conf import jobs_settings
from ..contracts.protocol import BackfillStore
from ..contracts.schedules import BackfillBegin, BackfillRun
from ..core.declare import job
from ..core.definition import JobHandle
from ..core.durations import Duration
from ..core.factories import factory_body
from ..core.installed import job_clock, job_driver
from ..core.logs import log_event
from ..core.retry import RetryPolicy
from ..core.run import JobRun
from ..core.scope import cross_tenant
from ..core.signals import CancelSignal, current_signal
from ..errors import (
    BackfillEnvironmentError,
    BackfillStalledError,
    InvariantError,
    JobDeclarationInvalidError,
    LeaseLostError,
    code_of,
)
from ..guards.sync_only import refuse_async
from .user_calls import accept_async

logger = logging.getLogger("ultimate_jobs")

DEFAULT_BACKFILL_RATE = 5
"""Batches per second when ``rate`` is not given: 5,000 rows a second at the default batch."""
DEFAULT_BACKFILL_BATCH = 1_000
MAX_SAFE_INTEGER = 2**53 - 1
PROGRESS_EVERY_S = 1.0
"""A pass writes its ledger row's progress (rows, batches, cursor) on its first page, then at most once a
second, and on its last page: the row is a report, and a statement per page would cost a fast sweep a
fifth of its speed."""
APP_VERSION_ENV = "APP_VERSION"
"""The environment variable whose value a pass stamps on its ledger row as ``app_version``."""

_REQUIRES = re.compile(r"[A-Za-z_]\w*\.\w+", re.ASCII)  # app_label.migration_name
_ENVIRONMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)  # ULTIMATE_JOBS["ENVIRONMENT"]'s shape


class BackfillInput(pydantic.BaseModel):
    """A pass's input: ``force`` sweeps again into a new ledger row although a completed one exists.
    Other fields are kept (a ``tenant=lambda i: i.org_id`` backfill reads its org from them)."""

    model_config = pydantic.ConfigDict(extra="allow")

    force: pydantic.StrictBool = False


@dataclass(frozen=True, slots=True)
class BackfillDescriptor:
    """What was declared, as ``registered_backfills()`` answers it: data, never the functions."""

    kind: Literal["backfill"]
    name: str
    checksum: str
    requires: str | None
    environments: tuple[str, ...] | None
    counts: bool
    batch: int
    rate: float

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "checksum": self.checksum,
            "requires": self.requires,
            "environments": list(self.environments) if self.environments is not None else None,
            "counts": self.counts,
            "batch": self.batch,
            "rate": self.rate,
        }


@dataclass(frozen=True, slots=True)
class BackfillDeclaration:
    """What :func:`backfill` declared beside its job: the descriptor and the functions it runs."""

    descriptor: BackfillDescriptor
    source: Callable[[Any], Any]
    handle: Callable[[list[Any], CancelSignal], Any]
    count: Callable[[Any], Any] | None
    cross_tenant: bool


_declarations: weakref.WeakKeyDictionary[JobHandle[Any, Any], BackfillDeclaration] = weakref.WeakKeyDictionary()


def backfill(
    *,
    name: str,
    tenant: Literal["none"] | Callable[[Any], str | None],
    source: Callable[[Any], Any],
    handle: Callable[[list[Any], CancelSignal], Any],
    batch: int = DEFAULT_BACKFILL_BATCH,
    rate: float = DEFAULT_BACKFILL_RATE,
    count: Callable[[Any], int] | None = None,
    requires: str | None = None,
    environments: Sequence[str] | None = None,
    queue: str = "default",
    priority: int = 0,
    retry: RetryPolicy | dict[str, Any] | None = None,
    timeout: Duration | None = None,
    step_timeout: Duration | None = None,
) -> JobHandle[Any, dict[str, Any]]:
    """Declare a backfill: a job whose pass hands every row ``source(ctx)`` matches to ``handle`` in pages.

    >>> drop_legacy = backfill(
    ...     name="drop-legacy",
    ...     tenant="none",
    ...     batch=500,
    ...     rate=10,
    ...     requires="blog.0007_post_publish_at",
    ...     environments=["staging", "production"],
    ...     source=lambda ctx: Post.objects.filter(publish_at=None),
    ...     count=lambda ctx: Post.objects.filter(publish_at=None).count(),
    ...     handle=lambda rows, signal: Post.objects.filter(pk__in=[p.pk for p in rows]).update(publish_at=now()),
    ... )
    >>> drop_legacy.enqueue()                  # the pass runs on a worker
    >>> drop_legacy.enqueue({"force": True})   # sweep again, into a new ledger row

    ``handle(rows, signal)`` gets the page's rows — model instances, or dicts/tuples when ``source``
    answers ``values()``/``values_list()`` with the primary key among the fields (no model instance per
    row: the fast form for a sweep that only needs a few columns) — and the step's cancel signal, no step
    runner: it runs at least once per page, so it must be idempotent. ``handle`` and ``count`` may be
    ``async def`` (``await Post.objects.filter(...).aupdate(...)``): each call is run to completion on the
    page's own thread, so the async ORM writes inside the page's transaction. ``batch`` (rows per page, a whole
    number >= 1) and ``rate`` (pages per second, finite and > 0) are refused here when wrong
    (``X_JOB_DECLARATION_INVALID``). The idempotency key is ``name``: enqueueing while a pass is live
    joins that pass. ``tenant="none"`` sweeps every tenant inside ``cross_tenant``, opened by the pass.
    """

    def bad(field_name: str, why: str) -> JobDeclarationInvalidError:
        return JobDeclarationInvalidError(f"backfill {name!r}: {field_name} {why}", {"job": name, "field": field_name})

    if not isinstance(name, str) or not name.strip():
        raise JobDeclarationInvalidError(
            f"backfill(): name must be a non-empty string, got {name!r}", {"field": "name"}
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise bad("batch", f"must be a whole number of rows >= 1, got {batch!r}")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise bad("rate", f"must be a finite number of batches per second > 0, got {rate!r} — raise it to go faster")
    for field_name, fn in (("source", source), ("handle", handle)):
        if not callable(fn):
            raise bad(field_name, "must be a function")
    if count is not None and not callable(count):
        raise bad("count", "must be a function of the ctx answering how many rows are left")
    # source answers a lazy QuerySet, so it stays a plain def; handle and count may be async (run to
    # completion on the page's thread: features/user_calls.py); tenant: job() checks it
    refuse_async(source, what=f"backfill {name!r}: source", meta={"job": name, "field": "source"})
    run_handle = accept_async(handle, what=f"backfill {name!r}: handle", meta={"job": name, "field": "handle"})
    run_count = None
    if count is not None:
        run_count = accept_async(count, what=f"backfill {name!r}: count", meta={"job": name, "field": "count"})
    if requires is not None and (not isinstance(requires, str) or not _REQUIRES.fullmatch(requires)):
        raise bad("requires", f"must name a migration as 'app_label.0007_name', got {requires!r}")
    declared_envs: tuple[str, ...] | None = None
    if environments is not None:
        if isinstance(environments, str) or not isinstance(environments, Sequence) or not environments:
            raise bad("environments", "must be a non-empty list of deployment names (omit it for every environment)")
        for env in environments:
            if not isinstance(env, str) or not _ENVIRONMENT.fullmatch(env):
                raise bad("environments", f"holds {env!r}, which is no deployment name")
        declared_envs = tuple(environments)

    descriptor = BackfillDescriptor(
        kind="backfill",
        name=name,
        checksum=definition_checksum(source, handle),
        requires=requires,
        environments=declared_envs,
        counts=count is not None,
        batch=batch,
        rate=float(rate),
    )
    declaration = BackfillDeclaration(descriptor, source, run_handle, run_count, cross_tenant=tenant == "none")

    def body(run: JobRun[BackfillInput]) -> dict[str, Any]:
        return _Pass(declaration, run).sweep()

    factory_body(body, "backfill", name)
    job_handle: JobHandle[Any, dict[str, Any]] = job(
        name=name,
        idempotency_key=lambda _input: name,
        tenant=tenant,
        input=BackfillInput,
        queue=queue,
        priority=priority,
        retry=retry,
        timeout=timeout,
        step_timeout=step_timeout,
    )(body)
    _declarations[job_handle] = declaration
    return job_handle


def definition_checksum(source: Callable[..., Any], handle: Callable[..., Any]) -> str:
    """The sha256 of ``source``'s and ``handle``'s source text (``batch`` and ``rate`` are tuning, not part
    of it). A function whose text cannot be read contributes its qualified name."""
    digest = hashlib.sha256()
    for fn in (source, handle):
        try:
            text = inspect.getsource(fn)
        except (OSError, TypeError):
            text = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        digest.update(text.encode())
        digest.update(b"\x00")
    return digest.hexdigest()


def declaration_of(handle: JobHandle[Any, Any]) -> BackfillDeclaration:
    """The declaration of a backfill's handle (``KeyError`` for a handle :func:`backfill` did not make —
    ask :func:`is_backfill` first)."""
    return _declarations[handle]


def is_backfill(value: object) -> bool:
    """Whether ``value`` is a handle :func:`backfill` declared — a plain job is not, nor a look-alike.

    >>> is_backfill(rewrite_slugs)
    True
    """
    try:
        return value in _declarations
    except TypeError:  # unhashable, or not weakly referenceable
        return False


def registered_backfills() -> list[BackfillDescriptor]:
    """Every backfill this process declares, by name: what exists, whether or not it ever ran.

    >>> [b.name for b in registered_backfills()]
    ['drop-legacy', 'rewrite-slugs']
    """
    from ..core import registry

    return [
        _declarations[h].descriptor
        for h in registry.registered("job")
        if isinstance(h, JobHandle) and h in _declarations
    ]


BackfillState = Literal["pending", "failed", "running", "completed", "excluded"]
PENDING_STATES: tuple[BackfillState, ...] = ("pending", "failed")


@dataclass(frozen=True, slots=True)
class BackfillStateRow:
    """One declared backfill and what the ledger says of it."""

    name: str
    state: BackfillState
    run: BackfillRun | None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``)."""
        return {"name": self.name, "state": self.state, "run": self.run.as_dict() if self.run else None}


@dataclass(frozen=True, slots=True)
class PendingBackfills:
    """Declared minus completed: ``pending`` names need a pass, ``orphaned`` names have ledger rows and no
    declaration any more."""

    environment: str
    rows: list[BackfillStateRow] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``--json``)."""
        return {
            "environment": self.environment,
            "rows": [r.as_dict() for r in self.rows],
            "pending": list(self.pending),
            "orphaned": list(self.orphaned),
        }


def pending_backfills(
    *,
    declarations: Sequence[BackfillDescriptor] | None = None,
    runs: Sequence[BackfillRun] | None = None,
    environment: str | None = None,
) -> PendingBackfills:
    """Each declared backfill's state — ``excluded`` (its ``environments`` leave this one out), ``running``
    (the newest pass is in flight), ``completed`` (a completed row exists), ``failed`` (the newest pass
    failed), ``pending`` (no row) — and the names still to sweep (``pending`` and ``failed``).

    Defaults: ``registered_backfills()``, the newest 1,000 rows of ``driver.backfills`` (none on a
    driver without a ledger), and ``ULTIMATE_JOBS["ENVIRONMENT"]``.

    >>> pending_backfills().pending
    ['drop-legacy']
    """
    declared = list(registered_backfills() if declarations is None else declarations)
    env = jobs_settings().environment if environment is None else environment
    if runs is None:
        store: BackfillStore | None = job_driver().backfills
        runs = store.list(limit=1_000) if store is not None else []
    by_name: dict[str, list[BackfillRun]] = {}
    for row in sorted(runs, key=lambda r: (r.started_at_ms, r.id), reverse=True):
        by_name.setdefault(row.name, []).append(row)
    rows: list[BackfillStateRow] = []
    for d in sorted(declared, key=lambda d: d.name):
        passes = by_name.get(d.name, [])
        newest = passes[0] if passes else None
        completed = next((r for r in passes if r.status == "completed"), None)
        state: BackfillState
        if d.environments is not None and env not in d.environments:
            state = "excluded"
        elif newest is None:
            state = "pending"
        elif newest.status == "running":
            state = "running"
        elif completed is not None:
            state, newest = "completed", completed
        else:
            state = "failed"
        rows.append(BackfillStateRow(d.name, state, newest))
    names = {d.name for d in declared}
    return PendingBackfills(
        environment=env,
        rows=rows,
        pending=[r.name for r in rows if r.state in PENDING_STATES],
        orphaned=sorted(set(by_name) - names),
    )


class _Pass:
    """One attempt of a backfill's pass: gate, ledger row, the pages, the convergence check."""

    def __init__(self, declaration: BackfillDeclaration, run: JobRun[BackfillInput]) -> None:
        self.d = declaration
        self.name = declaration.descriptor.name
        self.run = run
        self.clock = job_clock()
        self.store: BackfillStore | None = job_driver().backfills  # None: the pass runs with no bookkeeping
        self.row: BackfillRun | None = None
        self._next_report = 0.0  # time.monotonic() after which a page writes the ledger's progress
        self._page_started: float | None = None  # when this attempt's previous page began (the pace)

    def sweep(self) -> dict[str, Any]:
        descriptor = self.d.descriptor
        environment = jobs_settings().environment
        if descriptor.environments is not None and environment not in descriptor.environments:
            raise BackfillEnvironmentError(
                f"backfill {self.name!r} runs in {list(descriptor.environments)}, and this deployment is "
                f"{environment!r} (ULTIMATE_JOBS['ENVIRONMENT']); enqueue it where it belongs",
                {"backfill": self.name, "environment": environment},
            )
        if self.store is not None and not self.run.input.force:
            done = self.store.completed(self.name, self.run.tenant_id)
            if done is not None and done.run_id != self.run.run_id:
                self._warn_if_moved(done)
                return {
                    "name": self.name,
                    "batches": 0,
                    "rows": 0,
                    "skipped": True,
                    "previous_run_id": done.run_id,
                }
        if self.store is not None:
            self.row = self.store.begin(
                BackfillBegin(
                    name=self.name,
                    tenant_id=self.run.tenant_id,
                    checksum=descriptor.checksum,
                    app_version=os.environ.get(APP_VERSION_ENV) or None,
                    job_id=self.run.job_id,
                    run_id=self.run.run_id,
                    now_ms=self.clock.now_ms(),
                )
            )
            self._warn_if_moved(self.row)
        try:
            if self.d.cross_tenant:
                batches, rows = cross_tenant(f"backfill {self.name}", self._pages)
            else:
                batches, rows = self._pages()
        except Exception as exc:
            if self.store is not None and self.row is not None and not self._lease_lost():
                self.store.finish(
                    self.row.id,
                    status="failed",
                    error_code=code_of(exc) or type(exc).__name__,
                    now_ms=self.clock.now_ms(),
                )
            raise
        if self.store is not None and self.row is not None:
            self.store.finish(
                self.row.id, status="completed", rows_processed=rows, batches=batches, now_ms=self.clock.now_ms()
            )
        return {"name": self.name, "batches": batches, "rows": rows, "skipped": False}

    def _lease_lost(self) -> bool:
        """Whether this attempt lost its claim: another worker may be running the pass on the same row
        already, so this one leaves the row alone (the verdict is read off the signal)."""
        reason = self.run.signal.reason
        return reason is not None and reason.code == LeaseLostError.default_code

    def _warn_if_moved(self, row: BackfillRun) -> None:
        if row.checksum != self.d.descriptor.checksum:
            log_event(
                logging.WARNING,
                "jobs.backfill.checksum-moved",
                backfill=self.name,
                stored=row.checksum,
                declared=self.d.descriptor.checksum,
                run_id=row.run_id,
            )

    def _pages(self) -> tuple[int, int]:
        """Every page, one step each; a replayed step answers its stored cursor without a statement."""
        batch = self.d.descriptor.batch
        cursor: Any = None
        total = 0
        index = 0
        while True:
            with self._page_transaction():
                out = self.run.step.run(f"batch:{index}", _PageCall(self, index, cursor, total))
            cursor, total = out["cursor"], out["total"]
            index += 1
            if out["rows"] < batch:
                break
        self._check_converged()
        return index, total

    def _page_transaction(self) -> Any:
        """One transaction per page on the jobs database — the page's read, ``handle``'s writes to that
        database, the ledger's progress and the step's checkpoint commit together: one commit (one WAL
        flush) per page instead of two, and a page whose checkpoint is lost is a page whose writes are
        too. A driver with no database alias (memory) gets none."""
        alias = job_driver().alias
        return transaction.atomic(using=alias) if alias is not None else contextlib.nullcontext()

    def page(self, index: int, cursor: Any, total: int) -> dict[str, Any]:
        """One page: wait out the rest of the previous page's interval (before any statement, so no
        transaction is open on the server while it waits), read ``batch`` rows past ``cursor``, hand them
        over, record. A replayed page runs none of this, so a resumed pass re-pays no pause."""
        signal = current_signal() or self.run.signal
        if self._page_started is not None:
            self._throttle(self._page_started, signal)
        started = time.monotonic()
        self._page_started = started
        queryset = self._source()
        pk_of = _pk_reader(queryset, self.name)
        if cursor is not None:
            queryset = queryset.filter(pk__gt=cursor)
        rows = list(queryset.order_by("pk")[: self.d.descriptor.batch])
        if rows:
            self.d.handle(rows, signal)
            cursor = cursor_value(pk_of(rows[-1]))
        total += len(rows)
        last = len(rows) < self.d.descriptor.batch
        if self.store is not None and self.row is not None and (last or started >= self._next_report):
            self._next_report = started + PROGRESS_EVERY_S
            self.store.progress(
                self.row.id, rows_processed=total, batches=index + 1, last_cursor=cursor, now_ms=self.clock.now_ms()
            )
        return {"cursor": cursor, "rows": len(rows), "total": total}

    def _throttle(self, started: float, signal: CancelSignal) -> None:
        """Wait out the rest of the interval (``1 / rate`` seconds) that began at ``started`` — the previous
        page's start — cut short by a cancel."""
        remaining = 1.0 / self.d.descriptor.rate - (time.monotonic() - started)
        if remaining > 0 and signal.wait(remaining):
            signal.throw_if_aborted()

    def _source(self) -> Any:
        return keyset_source(
            self.d.source(self.run.ctx), what=f"backfill {self.name!r}: source(ctx)", job=self.name, values=True
        )

    def _check_converged(self) -> None:
        """``count(ctx)`` once after the last page: rows it still matches mean source and count disagree."""
        if self.d.count is None:
            return
        left = self.d.count(self.run.ctx)
        if isinstance(left, bool) or not isinstance(left, int) or not 0 <= left <= MAX_SAFE_INTEGER:
            raise InvariantError(
                f"backfill {self.name!r}: count(ctx) answered {left!r}; answer a non-negative whole number",
                {"backfill": self.name},
            )
        if left > 0:
            raise BackfillStalledError(
                f"backfill {self.name!r}: the source ran out while count(ctx) still matches {left} rows — "
                "source and count select on different predicates; make them the same filter",
                {"backfill": self.name, "count": left},
            )


@dataclass(frozen=True, slots=True)
class _PageCall:
    """``step.run``'s function for one page (bound values, not the loop's variables)."""

    sweep: _Pass
    index: int
    cursor: Any
    total: int

    def __call__(self) -> dict[str, Any]:
        return self.sweep.page(self.index, self.cursor, self.total)


def _pk_reader(queryset: Any, name: str) -> Callable[[Any], Any]:
    """How to read the primary key off one row of ``queryset``: a model instance's ``pk``, or — for a
    ``values()``/``values_list()`` source, whose rows cost no model instance each — the pk among the
    selected fields (``X_JOB_DECLARATION_INVALID`` when it is not selected: the pass could not page)."""
    from django.db.models.query import (
        FlatValuesListIterable,
        ModelIterable,
        NamedValuesListIterable,
        ValuesIterable,
        ValuesListIterable,
    )

    kind = queryset._iterable_class
    if kind is ModelIterable or not issubclass(
        kind, ValuesIterable | ValuesListIterable | FlatValuesListIterable | NamedValuesListIterable
    ):
        return _instance_pk
    meta, query = queryset.model._meta, queryset.query
    selected = list(queryset._fields or [*query.extra_select, *query.values_select, *query.annotation_select])
    names = {"pk", meta.pk.name, meta.pk.attname}
    where = next((n for n, field_name in enumerate(selected) if field_name in names), None)
    if where is None:
        raise JobDeclarationInvalidError(
            f"backfill {name!r}: source(ctx) selects {selected} with values()/values_list(), which leaves out "
            f"the primary key the pass pages by — add 'pk' to the fields",
            {"job": name, "field": "source"},
        )
    if issubclass(kind, ValuesIterable):
        key = selected[where]
        return lambda row: row[key]
    if issubclass(kind, FlatValuesListIterable):
        return lambda row: row
    return lambda row: row[where]


def _instance_pk(row: Any) -> Any:
    return row.pk


def keyset_source(queryset: object, *, what: str, job: str, values: bool = False) -> Any:
    """``queryset`` when it can be paged by primary key (a QuerySet with no order, slice or
    ``distinct(fields)`` of its own, and no ``values()``/``values_list()`` unless ``values``); else
    ``X_JOB_DECLARATION_INVALID`` naming ``what`` answered it."""
    from django.db.models import QuerySet

    if not isinstance(queryset, QuerySet):
        raise JobDeclarationInvalidError(
            f"{what} answered {type(queryset).__name__}; answer a QuerySet (Model.objects.filter(...)), which "
            "is paged by primary key",
            {"job": job, "field": "source"},
        )
    query = queryset.query
    if query.order_by or query.is_sliced or query.distinct_fields or (query.values_select and not values):
        shapes = "order_by(), slice" + ("" if values else ", values()") + " or distinct(fields)"
        raise JobDeclarationInvalidError(
            f"{what} carries its own {shapes}; the pages go by primary key and own the order — drop them and "
            "filter only",
            {"job": job, "field": "source"},
        )
    return queryset


def cursor_value(pk: Any) -> Any:
    """A primary key as the step stores it: an int stays an int, anything else (UUID, text) is its text."""
    if isinstance(pk, int) and not isinstance(pk, bool):
        return pk
    return str(pk)
