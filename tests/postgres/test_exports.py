"""``export_rows()`` on the Postgres driver, in-process (``run_jobs``, the executor a worker uses): one object
per page into a real ``FileSystemStorage``, the manifest, the header in part 0 only, formula cells
neutralised and numbers untouched, a replayed page rewriting its part, the refusals by code, the tenant
rules — and the worker's peak memory flat from 10,000 to 100,000 rows.

The rows are ``tests.secapp.Post`` (unscoped) and ``Bucket`` (tenant-scoped) rows on committed data.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.files.storage import FileSystemStorage
from django.db import connection

from tests.conftest import AnyJobsEnv, installed
from tests.helpers import many_posts
from tests.secapp.models import Bucket, Post
from ultimate_jobs import export_part_key, export_rows
from ultimate_jobs.drivers.postgres.driver import PostgresDriver
from ultimate_jobs.errors import UltimateError
from ultimate_jobs.testing import FrozenClock, run_jobs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pg() -> Iterator[AnyJobsEnv]:
    clock = FrozenClock()
    with installed(clock, PostgresDriver(clock=clock)) as env:
        yield env


@pytest.fixture
def storage(tmp_path: Path) -> FileSystemStorage:
    return FileSystemStorage(location=str(tmp_path / "exports"))


def posts(n: int, title: str = "Post {i}") -> list[int]:
    many_posts(n, title)
    return list(Post.objects.order_by("pk").values_list("pk", flat=True))


def read_parts(storage: FileSystemStorage, prefix: str, fmt: str = "csv") -> tuple[dict[str, Any], list[bytes]]:
    """The manifest and every part it counts, rebuilt from the count with ``export_part_key``."""
    with storage.open(f"{prefix}/manifest.json") as fh:
        manifest = json.loads(fh.read())
    parts = []
    for i in range(manifest["parts"]):
        with storage.open(export_part_key(prefix, i, fmt)) as fh:  # type: ignore[arg-type]
            parts.append(fh.read())
    return manifest, parts


def files(storage: FileSystemStorage, prefix: str) -> list[str]:
    return sorted(storage.listdir(prefix)[1])


def post_export(storage: FileSystemStorage, **options: Any) -> Any:
    defaults: dict[str, Any] = {
        "name": "posts.export",
        "tenant": "none",
        "prefix": lambda i: f"exports/{i['export_id']}",
        "source": lambda run: Post.objects.all(),
        "columns": ["id", "title", "delta"],
        "row": lambda p: {"id": p.pk, "title": p.title, "delta": -p.pk},
        "sink": lambda: storage,
        "batch": 1_000,
    }
    return export_rows(**{**defaults, **options})


def test_one_part_per_page_a_counting_manifest_and_one_valid_file_when_concatenated(
    pg: AnyJobsEnv, storage: FileSystemStorage
) -> None:
    pks = posts(2_500)
    export = post_export(storage)
    enqueued = export.enqueue({"export_id": "e1"})
    report = run_jobs(pg.driver, clock=pg.clock)
    assert report.outcomes["completed"] == 1
    assert report.executions[-1].result == {"prefix": "exports/e1", "parts": 3, "rows": 2_500, "format": "csv"}
    assert files(storage, "exports/e1") == ["manifest.json", "part-00000.csv", "part-00001.csv", "part-00002.csv"]
    manifest, parts = read_parts(storage, "exports/e1")
    assert manifest == {
        "version": 1, "name": "posts.export", "format": "csv", "columns": ["id", "title", "delta"],
        "parts": 3, "rows": 2_500, "run_id": enqueued.run_id,
    }  # fmt: skip
    assert parts[0].startswith(b"id,title,delta\r\n") and not parts[1].startswith(b"id,")
    assert all(p.endswith(b"\n") for p in parts)
    rows = list(csv.DictReader(io.StringIO(b"".join(parts).decode())))  # cat part-* is one file
    assert [int(r["id"]) for r in rows] == pks
    assert rows[0] == {"id": str(pks[0]), "title": "Post 0", "delta": str(-pks[0])}
    # each page's step stores the cursor and two counters — never a row
    operator_store = pg.driver.operator
    assert operator_store is not None
    outputs = {s.name: s.output for s in operator_store.steps(enqueued.id)}
    assert outputs["part:1"] == {"cursor": pks[1_999], "rows": 1_000, "total": 2_000}
    assert outputs["part:2"] == {"cursor": pks[-1], "rows": 500, "total": 2_500}


def test_a_formula_cell_is_neutralised_and_a_negative_number_is_not(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    titles = ['=HYPERLINK("http://evil","x")', "+1+2", "-3", "@SUM(A1)", "\tTAB", "\rCR", 'plain, "quoted"\nline']
    Post.objects.bulk_create(Post(title=t) for t in titles)
    export = post_export(storage, row=lambda p: {"id": p.pk, "title": p.title, "delta": -7})
    export.enqueue({"export_id": "f"})
    run_jobs(pg.driver, clock=pg.clock)
    _, parts = read_parts(storage, "exports/f")
    rows = list(csv.DictReader(io.StringIO(b"".join(parts).decode(), newline="")))
    assert [r["title"] for r in rows] == ["'" + t for t in titles[:6]] + [titles[6]]
    assert {r["delta"] for r in rows} == {"-7"}  # a number stays a number


def test_jsonl_writes_one_object_per_line_with_values_as_they_are(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    pks = posts(25, title="=cmd|{i}")
    export = post_export(storage, format="jsonl", batch=10)
    export.enqueue({"export_id": "j"})
    report = run_jobs(pg.driver, clock=pg.clock)
    assert report.executions[-1].result["parts"] == 3
    assert files(storage, "exports/j") == ["manifest.json", "part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    manifest, parts = read_parts(storage, "exports/j", "jsonl")
    assert (manifest["format"], manifest["rows"]) == ("jsonl", 25)
    lines = b"".join(parts).decode().splitlines()
    objects = [json.loads(line) for line in lines]
    assert [o["id"] for o in objects] == pks
    # JSON is data to every reader: the text is kept verbatim, and the number is a JSON number
    assert objects[0] == {"id": pks[0], "title": "=cmd|0", "delta": -pks[0]}


def test_a_replayed_page_rewrites_its_own_part(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    pks = posts(50)
    seen: list[int] = []

    def row(p: Post) -> dict[str, Any]:
        seen.append(p.pk)
        if p.pk == pks[25] and seen.count(p.pk) == 1:
            raise RuntimeError("the database blinked on page 2")
        return {"id": p.pk, "title": p.title, "delta": 0}

    export = post_export(storage, row=row, batch=10, retry={"attempts": 3})
    export.enqueue({"export_id": "r"})
    # page 2 fails half-encoded: the retry replays pages 0 and 1 from their steps and reads page 2 again
    report = run_jobs(pg.driver, clock=pg.clock)
    assert (report.outcomes["retried"], report.outcomes["completed"]) == (1, 1)
    # the page that raised closed its server-side cursor at once (the report still holds the error and its
    # frames): a cursor left to the garbage collector would be closed in the middle of another statement
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_cursors")
        assert cursor.fetchone() == (0,)
    assert seen.count(pks[5]) == 1  # pages 0 and 1 replayed from their steps, never read again
    assert files(storage, "exports/r") == ["manifest.json"] + [f"part-0000{i}.csv" for i in range(5)]
    _, parts = read_parts(storage, "exports/r")
    ids = [int(r["id"]) for r in csv.DictReader(io.StringIO(b"".join(parts).decode()))]
    assert ids == pks


def test_a_part_written_twice_leaves_one_object_under_its_key(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    posts(5)
    export = post_export(storage, batch=10)
    export.enqueue({"export_id": "twice"})
    run_jobs(pg.driver, clock=pg.clock)
    first = read_parts(storage, "exports/twice")[1]
    export.enqueue({"export_id": "twice"})  # the same export again: the same keys, rewritten
    run_jobs(pg.driver, clock=pg.clock)
    assert files(storage, "exports/twice") == ["manifest.json", "part-00000.csv"]
    assert read_parts(storage, "exports/twice")[1] == first


def test_an_empty_export_writes_the_header_and_a_manifest(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    export = post_export(storage)
    export.enqueue({"export_id": "empty"})
    report = run_jobs(pg.driver, clock=pg.clock)
    assert report.executions[-1].result == {"prefix": "exports/empty", "parts": 1, "rows": 0, "format": "csv"}
    assert read_parts(storage, "exports/empty")[1] == [b"id,title,delta\r\n"]


def dead_code(pg: AnyJobsEnv, job_id: str) -> tuple[str | None, str, str]:
    report = run_jobs(pg.driver, clock=pg.clock)
    last = report.last(job_id)
    assert last is not None
    error = last.error
    return last.outcome, getattr(error, "code", type(error).__name__), getattr(error, "message", str(error))


def test_a_row_key_outside_the_columns_is_refused(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    posts(3)
    export = post_export(storage, row=lambda p: {"id": p.pk, "title": p.title, "slug": p.slug})
    outcome, code, message = dead_code(pg, export.enqueue({"export_id": "x"}).id)
    assert (outcome, code) == ("dead-lettered", "X_EXPORT_ROW_INVALID")
    assert "['slug']" in message and "add them to columns" in message
    export2 = post_export(storage, name="posts.export2", row=lambda p: {"id": p.pk, "title": {"nested": 1}})
    outcome, code, message = dead_code(pg, export2.enqueue({"export_id": "y"}).id)
    assert (outcome, code) == ("dead-lettered", "X_EXPORT_ROW_INVALID") and "'title'" in message


def test_a_page_past_max_part_bytes_names_the_batch_to_lower(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    posts(200, title="{i}" + "x" * 60)
    export = post_export(storage, batch=100, max_part_bytes=2_048)
    outcome, code, message = dead_code(pg, export.enqueue({"export_id": "big"}).id)
    assert (outcome, code) == ("dead-lettered", "X_EXPORT_PART_TOO_LARGE")
    assert "batch=100" in message and "lower batch (to about" in message
    assert not storage.exists("exports/big/part-00000.csv")  # nothing over the bound was written


def test_tenant_none_gets_no_cross_tenant_escape(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    Bucket.objects.create(org_id="org-1", name="a")
    export = export_rows(name="buckets.all", tenant="none", prefix=lambda i: "exports/buckets",
                         source=lambda run: Bucket.objects.all(), columns=["org_id", "name"],
                         sink=lambda: storage)  # fmt: skip
    outcome, code, _ = dead_code(pg, export.enqueue({}).id)
    assert (outcome, code) == ("dead-lettered", "X_TENANCY_ACTOR_ORG_REQUIRED")


def test_a_tenant_export_reads_its_org_and_refuses_another(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    Bucket.objects.bulk_create([Bucket(org_id="org-1", name="mine"), Bucket(org_id="org-2", name="theirs")])
    export = export_rows(name="buckets.org", tenant=lambda i: i["org_id"],
                         prefix=lambda i: f"exports/{i['org_id']}/{i['source']}",
                         source=lambda run: Bucket.objects.filter(org_id=run.input["org_id"])
                         if run.input["source"] == "own" else Bucket.objects.all(),
                         columns=["org_id", "name"], sink=lambda: storage)  # fmt: skip
    export.enqueue({"org_id": "org-1", "source": "own"})
    run_jobs(pg.driver, clock=pg.clock)
    assert read_parts(storage, "exports/org-1/own")[1] == [b"org_id,name\r\norg-1,mine\r\n"]
    outcome, code, _ = dead_code(pg, export.enqueue({"org_id": "org-1", "source": "every"}).id)
    assert (outcome, code) == ("dead-lettered", "X_TENANCY_ACTOR_MISMATCH")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"format": "xml"}, "format"),
        ({"columns": []}, "columns"),
        ({"columns": ["id", "id"]}, "columns"),
        ({"batch": 0}, "batch"),
        ({"max_part_bytes": 10}, "max_part_bytes"),
        ({"rate": 0}, "rate"),
        ({"row": "id"}, "row"),
        ({"source": None}, "source"),
    ],
)
def test_declaration_refusals(pg: AnyJobsEnv, storage: FileSystemStorage, options: dict[str, Any], field: str) -> None:
    with pytest.raises(UltimateError) as caught:
        post_export(storage, **options)
    assert (caught.value.code, caught.value.meta["field"]) == ("X_JOB_DECLARATION_INVALID", field)


@pytest.mark.parametrize("prefix", ["/abs", "a/../b", "", "a//b"])
def test_a_prefix_outside_the_storage_root_is_refused(pg: AnyJobsEnv, storage: FileSystemStorage, prefix: str) -> None:
    export = post_export(storage, prefix=lambda i: prefix, idempotency_key=lambda i: "k")
    outcome, code, message = dead_code(pg, export.enqueue({}).id)
    assert (outcome, code) == ("dead-lettered", "X_INVARIANT") and "relative path" in message


def peak_bytes(pg: AnyJobsEnv, storage: FileSystemStorage, export_id: str) -> int:
    export = post_export(storage, name=f"posts.{export_id}", batch=5_000, max_part_bytes=256 * 1024)
    export.enqueue({"export_id": export_id})
    gc.collect()
    tracemalloc.start()
    try:
        report = run_jobs(pg.driver, clock=pg.clock)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.outcomes["completed"] == 1, report.outcomes
    return peak


@pytest.mark.slow
def test_the_peak_memory_of_an_export_does_not_grow_with_its_rows(pg: AnyJobsEnv, storage: FileSystemStorage) -> None:
    posts(10_000)
    peak_bytes(pg, storage, "warm")  # the first run imports and caches what later runs reuse: not measured
    small = peak_bytes(pg, storage, "small")
    Post.objects.all().delete()
    pks = posts(100_000)
    large = peak_bytes(pg, storage, "large")
    manifest, parts = read_parts(storage, "exports/large")
    assert manifest["parts"] == 20
    ids = [int(r["id"]) for r in csv.DictReader(io.StringIO(b"".join(parts).decode()))]
    assert ids == pks
    # ten times the rows, the same heap: one page (5,000 rows, one part under 256 KiB) at a time. What each
    # page leaves behind (its step, ~3 KB) stays well inside the 20 % at 5,000-row pages (at 1,000 it would
    # not), while keeping as little as a pk per row (~36 bytes) would add 3.6 MB to a ~1.4 MB peak
    assert large <= 1.2 * small, (small, large)
