"""Every backend under ``ultimate_jobs/drivers/`` keeps one skeleton, so a reader who knows one knows
where everything is in the others — and a new module lands where its siblings are.

Each backend package holds:

- ``driver`` — the driver class, the whole contract's entry point;
- ``operator`` — the operator surface (``driver.operator``);
- ``stores`` — the fleet slots, the scheduler's leader and watermarks, the backfill ledger;
- ``rows`` — how a stored row becomes one of the shared records. For the memory backend that is its
  mutable :class:`MemoryRow` and the copies it hands out; there is no cursor row to decode, but the
  boundary is the same: nothing stored leaves the backend without passing through ``rows``;
- where a backend keeps what it runs against its store: ``queries/`` — the SQL statement catalogue for
  Postgres and SQLite, the Lua script catalogue for Redis. The memory backend runs no statements, so it
  has no ``queries``; its claim index (``index``) is the part that does what the SQL indexes do.

The backends that carry the transactional outbox and the event bus (memory, Postgres, SQLite) keep
them as ``outbox`` and ``events`` inside the backend's package, beside the driver.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import ultimate_jobs
from ultimate_jobs import drivers

DRIVERS = Path(drivers.__file__).parent
PACKAGE = Path(ultimate_jobs.__file__).parent
BACKENDS = ("memory", "postgres", "sqlite", "redis")
SKELETON = {"driver", "operator", "stores", "rows"}
CATALOGUED = ("postgres", "sqlite", "redis")  # the backends that run statements or scripts
OUTBOX_AND_EVENTS = ("memory", "postgres", "sqlite")


def modules(package: Path) -> set[str]:
    return {m.name for m in pkgutil.iter_modules([str(package)])}


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_package_has_the_skeleton(backend: str) -> None:
    package = DRIVERS / backend
    assert (package / "__init__.py").is_file(), f"drivers/{backend} is no package"
    assert modules(package) >= SKELETON, f"drivers/{backend} lacks {sorted(SKELETON - modules(package))}"


@pytest.mark.parametrize("backend", CATALOGUED)
def test_a_backend_that_runs_statements_keeps_them_in_one_catalogue(backend: str) -> None:
    queries = DRIVERS / backend / "queries"
    assert (queries / "__init__.py").is_file(), f"drivers/{backend}/queries is no package"
    assert modules(queries), f"drivers/{backend}/queries is empty"


def test_the_memory_backend_has_an_index_where_the_others_have_a_catalogue() -> None:
    found = modules(DRIVERS / "memory")
    assert "index" in found
    assert "queries" not in found


@pytest.mark.parametrize("backend", OUTBOX_AND_EVENTS)
def test_the_outbox_store_and_event_bus_live_with_their_backend(backend: str) -> None:
    assert {"outbox", "events"} <= modules(DRIVERS / backend)


def test_no_backend_module_sits_flat_in_drivers() -> None:
    flat = {name for name in modules(DRIVERS) if any(name.startswith(b) for b in BACKENDS)}
    assert flat == set(BACKENDS), f"move {sorted(flat - set(BACKENDS))} into its backend's package"
    assert "memory" not in modules(PACKAGE / "outbox") | modules(PACKAGE / "events")


def test_the_memory_driver_imports_from_its_package() -> None:
    from ultimate_jobs.drivers.memory import MemoryDriver
    from ultimate_jobs.drivers.memory.driver import MemoryDriver as Defined

    assert MemoryDriver is Defined


def test_every_script_the_redis_backend_runs_is_in_its_catalogue() -> None:
    pytest.importorskip("redis")
    from ultimate_jobs.drivers.redis.queries import SCRIPTS

    run: set[str] = set()
    for path in (DRIVERS / "redis").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "run"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                run.add(node.args[0].value)
    assert run, "found no driver.run(...) call: the scan no longer sees the driver's scripts"
    assert run <= SCRIPTS.keys(), f"run but not catalogued: {sorted(run - SCRIPTS.keys())}"
