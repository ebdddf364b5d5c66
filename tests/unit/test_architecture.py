"""The import directions of docs/architecture.md, enforced.

Every import in ``ultimate_jobs`` — at module level or inside a function, both are real dependencies — is
read with :mod:`ast`. A module belongs to the first layer (listed lowest first) whose prefix names it, and
it may import only its own layer and the layers below it. An import that points up fails this test with
the file, the line and both layers, so a new dependency against the design is a red build, not a review
comment.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ultimate_jobs"

# Lowest first. docs/architecture.md carries the same table; keep the two in step.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "ultimate_jobs.errors",
            "ultimate_jobs.defaults",
            "ultimate_jobs.core.clock",
            "ultimate_jobs.core.durations",
            "ultimate_jobs.core.ids",
            "ultimate_jobs.core.logs",
        ),
    ),
    (
        "contracts",
        (
            "ultimate_jobs.drivers.records",
            "ultimate_jobs.drivers.ordering",
            "ultimate_jobs.drivers.protocol",
            "ultimate_jobs.events.base",
            "ultimate_jobs.outbox.store",
        ),
    ),
    ("core", ("ultimate_jobs.core", "ultimate_jobs.guards", "ultimate_jobs.runtime")),
    ("backends", ("ultimate_jobs.drivers", "ultimate_jobs.events", "ultimate_jobs.models")),
    ("configuration", ("ultimate_jobs.conf",)),
    ("roles", ("ultimate_jobs.worker", "ultimate_jobs.scheduler", "ultimate_jobs.outbox")),
    ("features", ("ultimate_jobs.features", "ultimate_jobs.webhooks")),
    ("operator", ("ultimate_jobs.operator",)),
    ("surfaces", ("ultimate_jobs",)),  # the Django glue: apps, checks, admin, views, urls, cli, commands, testing
]
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str:
    for name, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return name
    raise AssertionError(f"{module} is in no layer")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import of an ``ultimate_jobs`` module in ``path``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *filter(None, [node.module])])
            else:
                target = node.module or ""
            for alias in node.names:  # ``from . import operator`` imports the module ``operator``
                full = f"{target}.{alias.name}"
                found.append((node.lineno, full if is_module(full) else target))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, module) for line, module in found if module.split(".")[0] == "ultimate_jobs"]


def upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        here = layer_of(module_name(path))
        for line, target in imports_of(path):
            there = layer_of(target)
            if RANK[there] > RANK[here]:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {here} imports {there} ({target})")
    return found


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports() == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The rule itself can fail: the job core importing the worker is reported."""
    module = PACKAGE / "core" / "execute.py"
    lines = imports_of(module)
    assert all(RANK[layer_of(target)] <= RANK["core"] for _, target in lines)
    assert RANK[layer_of("ultimate_jobs.worker.runtime")] > RANK[layer_of("ultimate_jobs.core.execute")]
    assert layer_of("ultimate_jobs.admin.jobs") == "surfaces"
    assert layer_of("ultimate_jobs.drivers.records") == "contracts"
    assert layer_of("ultimate_jobs.drivers.postgres.driver") == "backends"


def test_every_module_sits_in_a_folder_that_names_its_role() -> None:
    """The top level holds only the public API and Django's conventional modules; the rest lives in folders."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert top == ["__init__", "apps", "checks", "conf", "defaults", "django_tasks", "errors", "models", "urls"]
