"""``export_rows()``: a QuerySet streamed to object storage in pages, declared as a job.

``rows = list(Order.objects.all()); storage.save(key, csv(rows))`` works on 200 rows and runs the
worker out of memory on two million. An export is a factory over :func:`~ultimate_jobs.job` that
reads the source in keyset pages over the primary key (``pk > cursor ORDER BY pk LIMIT batch``) and
writes ONE object per page, plus a manifest:

- ``<prefix>/part-00000.csv``, ``part-00001.csv``, … — the key is the page INDEX
  (:func:`export_part_key`), so a page that runs twice rewrites its own part and a duplicate part
  cannot exist;
- each page is one ``step.run`` (``part:0``, ``part:1``, …) whose stored output is the cursor and two
  counters, never the rows — an attempt killed mid-export resumes at the page it stopped on;
- the header is in part 0 only and every line ends in a newline, so ``cat part-*`` is one valid file;
- ``max_part_bytes`` bounds the heap: a page is encoded whole before it is written, and one that
  grows past it is ``X_EXPORT_PART_TOO_LARGE``, naming the ``batch`` to lower;
- ``<prefix>/manifest.json`` COUNTS the parts (never lists them): :func:`export_part_key` rebuilds
  every key from the count.

>>> export_orders = export_rows(
...     name="orders.export",
...     input=ExportInput,
...     tenant=lambda i: i.org_id,
...     prefix=lambda i: f"exports/{i.org_id}/{i.export_id}",
...     source=lambda run: Order.objects.filter(org_id=run.input.org_id),
...     columns=["number", "placed_at", "total"],
...     row=lambda o: {"number": o.number, "placed_at": o.placed_at.isoformat(), "total": o.total_cents / 100},
...     sink=lambda: storages["exports"],
... )
>>> export_orders.enqueue({"org_id": "org-1", "export_id": "2026-12"})
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, cast

import pydantic
from asgiref.sync import async_to_sync

from ..core.declare import job
from ..core.definition import JobHandle
from ..core.durations import Duration
from ..core.factories import factory_body
from ..core.retry import RetryPolicy
from ..core.run import JobRun
from ..core.signals import CancelSignal, current_signal
from ..errors import ExportPartTooLargeError, ExportRowInvalidError, InvariantError, JobDeclarationInvalidError
from ..guards.sync_only import is_coroutine_callable, refuse_async
from .backfills import cursor_value, keyset_source

if TYPE_CHECKING:
    from django.core.files.storage import Storage

ExportFormat = Literal["csv", "jsonl"]
FORMATS: tuple[ExportFormat, ...] = ("csv", "jsonl")
DEFAULT_EXPORT_BATCH = 1_000
DEFAULT_MAX_PART_BYTES = 8 * 1024 * 1024
MIN_MAX_PART_BYTES = 1_024
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1

# A string cell a spreadsheet would evaluate: Excel, Sheets and LibreOffice run a cell that starts with
# one of these as a formula (=HYPERLINK(...), +cmd|..., @SUM(...), a leading TAB or CR).
_FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_LEAD_SET = frozenset(_FORMULA_LEADS)
_PREFIX_SEGMENT = re.compile(r"[^/\x00]+")


def export_part_key(prefix: str, index: int, format: ExportFormat) -> str:
    """The storage key of part ``index`` of the export under ``prefix``: what the manifest's count rebuilds.

    >>> [export_part_key("exports/org-1/2026-12", i, "csv") for i in range(2)]
    ['exports/org-1/2026-12/part-00000.csv', 'exports/org-1/2026-12/part-00001.csv']
    """
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvariantError(f"export_part_key: index must be a whole number >= 0, got {index!r}", {"index": index})
    if format not in FORMATS:
        raise InvariantError(f"export_part_key: format must be one of {FORMATS}, got {format!r}", {"format": format})
    return f"{_clean_prefix(prefix)}/part-{index:05d}.{format}"


def export_manifest_key(prefix: str) -> str:
    """The storage key of the export's manifest (``<prefix>/manifest.json``)."""
    return f"{_clean_prefix(prefix)}/{MANIFEST_NAME}"


def _clean_prefix(prefix: object) -> str:
    """``prefix`` without its trailing ``/``; a blank one, a leading ``/`` or a ``.``/``..`` segment is
    ``X_INVARIANT`` (the key must stay under the storage's root)."""
    if not isinstance(prefix, str):
        raise InvariantError(f"an export prefix must be a string, got {type(prefix).__name__}", {})
    cleaned = prefix.rstrip("/")
    segments = cleaned.split("/")
    if (
        not cleaned
        or cleaned.startswith("/")
        or any(not _PREFIX_SEGMENT.fullmatch(s) or s in (".", "..") for s in segments)
    ):
        raise InvariantError(
            f"export prefix {prefix[:80]!r} must be a relative path like 'exports/org-1/2026-12' "
            "(no leading '/', no empty, '.' or '..' segment)",
            {"prefix": prefix[:80]},
        )
    return cleaned


@dataclass(frozen=True, slots=True)
class _Declaration:
    name: str
    prefix: Callable[[Any], str]
    source: Callable[[JobRun[Any]], Any]
    format: ExportFormat
    columns: tuple[str, ...]
    row: Callable[[Any], Mapping[str, Any]] | None
    sink: Callable[[], Storage] | None
    batch: int
    max_part_bytes: int
    rate: float | None
    async_row: Callable[[Any], Awaitable[Mapping[str, Any]]] | None = None
    """``row`` when it is ``async def``: a page's rows are awaited one by one on one event loop."""


def export_rows(
    *,
    name: str,
    tenant: Literal["none"] | Callable[[Any], str | None],
    prefix: Callable[[Any], str],
    source: Callable[[JobRun[Any]], Any],
    columns: Sequence[str],
    input: type[pydantic.BaseModel] | None = None,
    format: ExportFormat = "csv",
    row: Callable[[Any], Mapping[str, Any] | Awaitable[Mapping[str, Any]]] | None = None,
    sink: Callable[[], Storage] | None = None,
    batch: int = DEFAULT_EXPORT_BATCH,
    max_part_bytes: int = DEFAULT_MAX_PART_BYTES,
    rate: float | None = None,
    idempotency_key: Callable[[Any], str] | None = None,
    queue: str = "default",
    priority: int = 0,
    retry: RetryPolicy | dict[str, Any] | None = None,
    timeout: Duration | None = None,
    step_timeout: Duration | None = None,
) -> JobHandle[Any, dict[str, Any]]:
    """Declare an export: a job that writes every row ``source(run)`` matches to ``sink()``, one object per page.

    >>> export_posts = export_rows(
    ...     name="posts.export",
    ...     tenant="none",
    ...     prefix=lambda i: f"exports/posts/{i['export_id']}",
    ...     source=lambda run: Post.objects.filter(published=True),
    ...     columns=["id", "title"],
    ...     row=lambda p: {"id": p.pk, "title": p.title},
    ...     sink=lambda: FileSystemStorage(location="/var/exports"),
    ... )
    >>> export_posts.enqueue({"export_id": "2026-12-01"})

    ``source(run)`` gets the :class:`~ultimate_jobs.JobRun` (``run.input``, ``run.ctx``) and answers a
    QuerySet with no ``order_by``/slice/``values``: the pass pages it by primary key. ``row(instance)``
    answers a mapping whose keys are among ``columns`` (a missing one is an empty cell; an extra one is
    ``X_EXPORT_ROW_INVALID``); without ``row`` each column is read as an attribute of the instance. An
    ``async def row`` is awaited for each instance of a page in turn, on one event loop per page, so a page's
    instances are held in memory until it is encoded (``batch`` bounds them).
    ``sink`` is a thunk answering a Django ``Storage`` (default: ``default_storage``), called when a
    part is written, never at import. ``prefix(input)`` names the folder; the idempotency key defaults
    to it, so enqueueing the same export while it runs joins that run. ``rate`` (pages per second) has
    no default. ``tenant="none"`` reads under no org and opens no ``cross_tenant`` scope for you: a
    tenant-scoped model in its source is ``X_TENANCY_ACTOR_ORG_REQUIRED``.

    CSV is written by the standard library's ``csv`` module; a string cell beginning with ``= + - @``,
    a TAB or a CR gets a leading ``'`` so a spreadsheet shows it instead of evaluating it (a number is
    never touched). JSON Lines writes one compact object per row.
    """

    def bad(field_name: str, why: str) -> JobDeclarationInvalidError:
        return JobDeclarationInvalidError(f"export {name!r}: {field_name} {why}", {"job": name, "field": field_name})

    if not isinstance(name, str) or not name.strip():
        raise JobDeclarationInvalidError(
            f"export_rows(): name must be a non-empty string, got {name!r}", {"field": "name"}
        )
    if format not in FORMATS:
        raise bad("format", f"must be one of {', '.join(FORMATS)}, got {format!r}")
    if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
        raise bad("columns", "must be a non-empty list of column names")
    if any(not isinstance(c, str) or not c for c in columns) or len(set(columns)) != len(columns):
        raise bad("columns", f"must be distinct non-empty strings, got {list(columns)!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise bad("batch", f"must be a whole number of rows >= 1, got {batch!r}")
    if isinstance(max_part_bytes, bool) or not isinstance(max_part_bytes, int) or max_part_bytes < MIN_MAX_PART_BYTES:
        raise bad("max_part_bytes", f"must be a whole number of bytes >= {MIN_MAX_PART_BYTES}, got {max_part_bytes!r}")
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0
    ):
        raise bad("rate", f"must be a finite number of pages per second > 0 (or None), got {rate!r}")
    for field_name, fn in (("prefix", prefix), ("source", source)):
        if not callable(fn):
            raise bad(field_name, "must be a function")
    for field_name, optional in (("row", row), ("sink", sink), ("idempotency_key", idempotency_key)):
        if optional is not None and not callable(optional):
            raise bad(field_name, "must be a function")
    # prefix, source and sink answer a key, a lazy QuerySet and a Storage: plain defs; row may be async
    callables: dict[str, object] = {"prefix": prefix, "source": source, "sink": sink}  # the rest: job()
    for field_name, given in callables.items():
        refuse_async(given, what=f"export {name!r}: {field_name}", meta={"job": name, "field": field_name})
    refuse_async(row, what=f"export {name!r}: row", meta={"job": name, "field": "row"}, allow_coroutines=True)
    row_is_async = is_coroutine_callable(row)  # awaited a page at a time (_Export._awaited_rows)

    declaration = _Declaration(
        name=name,
        prefix=prefix,
        source=source,
        format=format,
        columns=tuple(columns),
        row=cast("Callable[[Any], Mapping[str, Any]] | None", None if row_is_async else row),
        sink=sink,
        batch=batch,
        max_part_bytes=max_part_bytes,
        rate=float(rate) if rate is not None else None,
        async_row=cast("Callable[[Any], Awaitable[Mapping[str, Any]]]", row) if row_is_async else None,
    )

    def body(run: JobRun[Any]) -> dict[str, Any]:
        return _Export(declaration, run).write()

    factory_body(body, "export", name)
    key = idempotency_key or (lambda parsed: f"{name}:{_clean_prefix(prefix(parsed))}")
    return job(
        name=name,
        idempotency_key=key,
        tenant=tenant,
        input=input,
        queue=queue,
        priority=priority,
        retry=retry,
        timeout=timeout,
        step_timeout=step_timeout,
    )(body)


class _Export:
    """One attempt of an export: its pages (a step each), then the manifest."""

    def __init__(self, declaration: _Declaration, run: JobRun[Any]) -> None:
        self.d = declaration
        self.run = run
        self.prefix = _clean_prefix(declaration.prefix(run.input))
        self.column_set = frozenset(declaration.columns)

    def write(self) -> dict[str, Any]:
        cursor: Any = None
        total = 0
        index = 0
        parts = 1
        while True:
            out = self.run.step.run(f"part:{index}", _PageCall(self, index, cursor, total))
            cursor, total = out["cursor"], out["total"]
            if out["rows"] > 0:
                parts = index + 1
            index += 1
            if out["rows"] < self.d.batch:
                break
        manifest = {
            "version": MANIFEST_VERSION,
            "name": self.d.name,
            "format": self.d.format,
            "columns": list(self.d.columns),
            "parts": parts,
            "rows": total,
            "run_id": self.run.run_id,
        }
        self.run.step.run("manifest", lambda: self._put(export_manifest_key(self.prefix), _manifest_bytes(manifest)))
        return {"prefix": self.prefix, "parts": parts, "rows": total, "format": self.d.format}

    def page(self, index: int, cursor: Any, total: int) -> dict[str, Any]:
        """Read ``batch`` rows past ``cursor``, encode them into one part, write it under its index."""
        started = time.monotonic()
        signal = current_signal() or self.run.signal
        queryset = self._source()
        if cursor is not None:
            queryset = queryset.filter(pk__gt=cursor)
        # streamed into the encoder (a server-side cursor on Postgres): the page's bytes are its only copy
        rows = queryset.order_by("pk")[: self.d.batch].iterator(chunk_size=min(self.d.batch, 5_000))
        try:
            if self.d.async_row is not None:
                data, count, last_pk = self._encode(index, *self._awaited_rows(rows))
            else:
                data, count, last_pk = self._encode(index, rows, self._values)
        finally:
            # a page that raised mid-way leaves its cursor open: close it here, on this connection's turn —
            # left to the garbage collector, psycopg would close it in the middle of another statement
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        if count or index == 0:  # part 0 is written even for an empty export: it holds the header
            signal.throw_if_aborted()
            self._put(export_part_key(self.prefix, index, self.d.format), data)
        if last_pk is not None:
            cursor = cursor_value(last_pk)
        total += count
        self.run.progress(total, None, f"{index + 1} page(s)")
        if count == self.d.batch and self.d.rate is not None:
            self._throttle(started, signal)
        return {"cursor": cursor, "rows": count, "total": total}

    def _awaited_rows(self, rows: Iterable[Any]) -> tuple[list[Any], Callable[[Any], Mapping[str, Any]]]:
        """An async ``row``'s page: the instances read here (this thread holds the page's connection), then
        ``row(instance)`` awaited for each, in order, on one event loop (``async_to_sync``: one loop per
        page, not per row) — so the page's instances are held until it is encoded."""
        instances = list(rows)
        arow = self.d.async_row
        assert arow is not None

        async def answer_all() -> list[Mapping[str, Any]]:
            return [await arow(instance) for instance in instances]

        answers = dict(zip(map(id, instances), async_to_sync(answer_all)(), strict=True))
        return instances, lambda instance: self._checked(answers[id(instance)])

    def _encode(
        self, index: int, rows: Iterable[Any], values_of: Callable[[Any], Mapping[str, Any]]
    ) -> tuple[bytes, int, Any]:
        """One part's bytes, the rows in it and the last row's primary key (``None`` when it has none);
        ``values_of(instance)`` answers a row's cells by column."""
        limit = self.d.max_part_bytes
        count = 0
        last: Any = None
        buffer = io.StringIO()
        columns = self.d.columns
        if self.d.format == "csv":
            writer = csv.writer(buffer, lineterminator="\r\n")  # RFC 4180; a bare CR or LF in a cell is quoted
            if index == 0:
                writer.writerow(columns)
            name, writerow, tell = self.d.name, writer.writerow, buffer.tell
            for instance in rows:
                count += 1
                last = instance
                values = values_of(instance)
                cells: list[Any] = []
                for column in columns:
                    value = values.get(column)
                    kind = type(value)
                    # the two common cases inline (the encoder's hot loop); everything else in _csv_cell
                    if kind is str:
                        if value and value[0] in _FORMULA_LEAD_SET:
                            value = "'" + value
                    elif kind is not int:
                        value = _csv_cell(name, column, value)
                    cells.append(value)
                writerow(cells)
                if tell() > limit:
                    self._too_large(index, tell())
        else:
            for instance in rows:
                count += 1
                last = instance
                values = values_of(instance)
                buffer.write(json.dumps({c: _json_value(self.d.name, c, values.get(c)) for c in columns},
                                        ensure_ascii=False, separators=(",", ":"), allow_nan=False))  # fmt: skip
                buffer.write("\n")
                if buffer.tell() > limit:
                    self._too_large(index, buffer.tell())
        data = buffer.getvalue().encode()
        if len(data) > limit:
            self._too_large(index, len(data))
        return data, count, (last.pk if last is not None else None)

    def _values(self, instance: Any) -> Mapping[str, Any]:
        if self.d.row is None:
            return {c: getattr(instance, c) for c in self.d.columns}
        return self._checked(self.d.row(instance))

    def _checked(self, values: Any) -> Mapping[str, Any]:
        """What ``row()`` answered, when it is a mapping over the columns; else ``X_EXPORT_ROW_INVALID``."""
        if type(values) is dict and values.keys() <= self.column_set:
            return values  # the common case, checked in C
        if not isinstance(values, Mapping):
            raise ExportRowInvalidError(
                f"export {self.d.name!r}: row() answered {type(values).__name__}; answer a dict keyed by the columns",
                {"export": self.d.name},
            )
        extra = [k for k in values if k not in self.d.columns]
        if extra:
            raise ExportRowInvalidError(
                f"export {self.d.name!r}: row() answered {sorted(map(str, extra))[:5]}, which columns "
                f"{list(self.d.columns)} does not carry; add them to columns or stop answering them "
                "(a row() that copies the instance would export every field a later migration adds)",
                {"export": self.d.name, "keys": sorted(map(str, extra))[:20]},
            )
        return values

    def _too_large(self, index: int, size: int) -> None:
        suggestion = max(1, self.d.batch * self.d.max_part_bytes // max(size, 1) // 2)
        raise ExportPartTooLargeError(
            f"export {self.d.name!r}: page {index} passed max_part_bytes ({self.d.max_part_bytes} bytes) at "
            f"{size} bytes with batch={self.d.batch}; lower batch (to about {suggestion}) — a page is held "
            "in memory whole before it is written",
            {"export": self.d.name, "page": index, "batch": self.d.batch, "max_part_bytes": self.d.max_part_bytes},
        )

    def _put(self, key: str, data: bytes) -> str:
        """Write ``data`` under exactly ``key``, replacing what a previous run of this page left there."""
        from django.core.files.base import ContentFile

        storage = self._storage()
        if storage.exists(key):
            storage.delete(key)
        saved = storage.save(key, ContentFile(data))
        if saved != key:
            raise InvariantError(
                f"export {self.d.name!r}: the storage saved {key!r} as {saved!r}; a part's key must be exact — "
                "use a storage that writes the name it is given",
                {"export": self.d.name, "key": key, "saved": saved},
            )
        return key

    def _storage(self) -> Storage:
        from django.core.files.storage import Storage, default_storage

        storage = self.d.sink() if self.d.sink is not None else default_storage
        if not isinstance(storage, Storage):
            raise InvariantError(
                f"export {self.d.name!r}: sink() answered {type(storage).__name__}; answer a Django Storage "
                "(FileSystemStorage, storages['exports'], a django-storages backend)",
                {"export": self.d.name},
            )
        return storage

    def _source(self) -> Any:
        return keyset_source(self.d.source(self.run), what=f"export {self.d.name!r}: source(run)", job=self.d.name)

    def _throttle(self, started: float, signal: CancelSignal) -> None:
        assert self.d.rate is not None
        remaining = 1.0 / self.d.rate - (time.monotonic() - started)
        if remaining > 0 and signal.wait(remaining):
            signal.throw_if_aborted()


@dataclass(frozen=True, slots=True)
class _PageCall:
    export: _Export
    index: int
    cursor: Any
    total: int

    def __call__(self) -> dict[str, Any]:
        return self.export.page(self.index, self.cursor, self.total)


def _csv_cell(export: str, column: str, value: Any) -> Any:
    """One CSV cell: a string that a spreadsheet would evaluate gets a leading ``'``; numbers stay numbers."""
    if value is None:
        return ""
    if isinstance(value, str):
        return "'" + value if value.startswith(_FORMULA_LEADS) else value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _bad_value(export, column, value)
        return value
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise _bad_value(export, column, value)


def _json_value(export: str, column: str, value: Any) -> Any:
    """One JSON Lines value: JSON scalars as they are, a Decimal/date/UUID as its text."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _bad_value(export, column, value)
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise _bad_value(export, column, value)


def _bad_value(export: str, column: str, value: Any) -> ExportRowInvalidError:
    return ExportRowInvalidError(
        f"export {export!r}: column {column!r} got {type(value).__name__} {str(value)[:40]!r}, which no "
        "encoder writes; answer text, a number, a bool, a date or None from row()",
        {"export": export, "column": column, "type": type(value).__name__},
    )


def _manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
