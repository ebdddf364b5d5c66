"""The import rules of docs/architecture.md, enforced — the page's own layer table is the map.

Every import in ``ultimate_jobs`` — at module level or inside a function, both are real dependencies — is
read with :mod:`ast` (an import under ``if TYPE_CHECKING:`` is not: it never runs). The layers come from
the table on docs/architecture.md, lowest first: a ``.py`` there names one module, a folder everything
under it, and a module belongs to the first layer that names it. The rules:

- every module is placed: a new folder or module the page does not name fails, instead of falling into
  some layer by accident;
- an import never points up a layer;
- no two modules import each other, directly or through others (no cycle);
- no module imports another module's private (``_``-prefixed) name;
- a backend (``memory``, ``postgres``, ``sqlite``, ``redis``) never imports another one; the shared SQL
  core (``drivers/sql/``) is no backend of its own.

Each failure names the file and the line, so a new dependency against the design is a red build.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ultimate_jobs"
PAGE = ROOT / "docs" / "architecture.md"
BACKENDS = ("memory", "postgres", "sqlite", "redis")

Layer = tuple[str, frozenset[str], tuple[str, ...]]  # name, modules named exactly, folder prefixes


def page_layers(text: str) -> list[Layer]:
    """The layer table of the page: each row's backticked ``.py`` files and folders (text in parentheses
    is commentary, not a place)."""
    table = text.split("## The layers", 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0]
    layers: list[Layer] = []
    for row in table.splitlines()[2:]:  # after the header and the |---| line
        name, _, places = (cell.strip() for cell in row.strip("|").split("|"))
        places = re.sub(r"\([^)]*\)", "", places)
        exact, prefixes = set(), []
        for place in re.findall(r"`([^`]+)`", places):
            dotted = ".".join(["ultimate_jobs", *place.strip("/").removesuffix(".py").split("/")])
            if place.endswith(".py"):
                exact.add(dotted.removesuffix(".__init__"))
            else:
                prefixes.append(dotted)
        layers.append((name, frozenset(exact), tuple(prefixes)))
    return layers


LAYERS = page_layers(PAGE.read_text())
RANK = {name: rank for rank, (name, _, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str | None:
    for name, exact, prefixes in LAYERS:
        if module in exact or any(module == p or module.startswith(p + ".") for p in prefixes):
            return name
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imports_of(path: Path, source: str | None = None) -> list[tuple[int, str, str]]:
    """``(line, module, name)`` for every runtime import of an ``ultimate_jobs`` module in ``path``: ``name``
    is what ``from module import name`` took (``""`` for ``import module`` or a submodule)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(source if source is not None else path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *filter(None, [node.module])])
            else:
                target = node.module or ""
            for alias in node.names:  # ``from . import operator`` imports the module ``operator``
                full = f"{target}.{alias.name}"
                found.append((node.lineno, full, "") if is_module(full) else (node.lineno, target, alias.name))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, "") for alias in node.names)
    return [(line, module, taken) for line, module, taken in found if module.split(".")[0] == "ultimate_jobs"]


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def backend_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] in ("drivers", "events") and parts[2] in BACKENDS else None


# -- the rules ---------------------------------------------------------------------------------------


def test_the_page_names_the_nine_layers_in_order() -> None:
    assert [name for name, _, _ in LAYERS] == [
        "foundation",
        "contracts",
        "core",
        "backends",
        "configuration",
        "roles",
        "features",
        "operator",
        "surfaces",
    ]


def test_every_module_is_placed_by_the_page() -> None:
    unplaced = [str(path.relative_to(ROOT)) for path in modules() if layer_of(module_name(path)) is None]
    assert unplaced == [], "add each to the layer table of docs/architecture.md"


def test_no_module_imports_a_layer_above_its_own() -> None:
    found = []
    for path in modules():
        here = layer_of(module_name(path))
        for line, target, _ in imports_of(path):
            there = layer_of(target)
            if here is not None and there is not None and RANK[there] > RANK[here]:
                found.append(f"{where(path, line)}: {here} imports {there} ({target})")
    assert found == []


def test_no_modules_import_each_other() -> None:
    graph = {module_name(path): {target for _, target, _ in imports_of(path)} for path in modules()}
    for name, targets in graph.items():  # a package's own __init__ is where its modules live, not a cycle
        targets.discard(name)
        graph[name] = {t for t in targets if not name.startswith(t + ".")}
    assert cycles(graph) == []


def test_no_module_imports_a_private_name_of_another() -> None:
    found = [
        f"{where(path, line)}: {taken} from {target}"
        for path in modules()
        for line, target, taken in imports_of(path)
        if taken.startswith("_") and not taken.startswith("__") and target != module_name(path)
    ]
    assert found == []


def test_no_backend_imports_another() -> None:
    found = []
    for path in modules():
        here = backend_of(module_name(path))
        for line, target, _ in imports_of(path):
            there = backend_of(target)
            if here is not None and there is not None and there != here:
                found.append(f"{where(path, line)}: {here} imports {target}")
    assert found == []


def test_every_module_sits_in_a_folder_that_names_its_role() -> None:
    """The top level holds only the public API and Django's conventional modules; the rest lives in folders."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert top == ["__init__", "apps", "checks", "conf", "defaults", "django_tasks", "errors", "models", "urls"]


# -- each rule can fail ------------------------------------------------------------------------------


def test_the_page_places_modules_where_the_design_puts_them() -> None:
    assert layer_of("ultimate_jobs.contracts.jobs") == "contracts"
    assert layer_of("ultimate_jobs.contracts.ordering") == "contracts"
    assert layer_of("ultimate_jobs.drivers.postgres.driver") == "backends"
    assert layer_of("ultimate_jobs.admin.jobs") == "surfaces"
    assert layer_of("ultimate_jobs") == "surfaces"
    assert layer_of("ultimate_jobs.brand_new_folder.thing") is None  # no catch-all: a new folder is unplaced
    assert RANK["roles"] > RANK["core"]


def test_the_checks_see_a_cycle_a_private_import_and_a_backend_crossing() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert cycles({"a": ["b"], "b": []}) == []
    snippet = (
        "from typing import TYPE_CHECKING\n"
        "from ...core.scope import _scope\n"
        "from ..redis.rows import text\n"
        "if TYPE_CHECKING:\n"
        "    from ..memory.driver import MemoryDriver\n"
    )
    found = imports_of(PACKAGE / "drivers" / "postgres" / "driver.py", snippet)
    assert (2, "ultimate_jobs.core.scope", "_scope") in found
    assert (3, "ultimate_jobs.drivers.redis.rows", "text") in found
    assert all("memory" not in target for _, target, _ in found)  # a TYPE_CHECKING import never runs
    assert backend_of("ultimate_jobs.drivers.redis.rows") == "redis"
    assert backend_of("ultimate_jobs.drivers.sql.driver") is None
