"""The shape of include/batchpoint, read from the source with `ast` (no import, no Spark).

- Packages import each other one way: the graph of `batchpoint.<package>` imports,
  counting imports inside functions (they hide a dependency, they do not remove it), is
  acyclic. So are the files: no two modules import each other, directly or round.
- Every import goes down the floors of docs/design/architecture.md's floor table (read
  from the page), and every package is in it.
- The core imports no Airflow, and the storage-side core no Spark, not even through
  another batchpoint package it imports.
- The protocol's collaborators take narrow ports: no protocol module but the
  coordinator itself imports `batchpoint.protocol.coordinator` (not even for typing).
- The library imports none of the repository's own tools (demo/, devstack/), which stay
  out of its wheel.
- No module is over MAX_LINES lines, and no function of the project's code outside tests
  (the library, the DAGs, the plugins, the Spark entry points, the benches, the demo and
  the local services) is over MAX_FUNCTION_LINES.

Imports under `if TYPE_CHECKING:` are left out everywhere but in the coordinator check:
they never run.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.python_source import parse_file

INCLUDE = Path(__file__).resolve().parents[1] / "include"
ROOT_PACKAGE = "batchpoint"
MAX_LINES = 450
#: Whatever is not a test: every function here is held to MAX_FUNCTION_LINES.
PROJECT = INCLUDE.parent
SOURCE_ROOTS = (
    INCLUDE / "batchpoint",
    PROJECT / "dags",
    PROJECT / "plugins",
    PROJECT / "spark_jobs",
    PROJECT / "bench",
    PROJECT / "demo",
    PROJECT / "devstack",
)
#: The repository's own tools, top-level packages beside include/: they import the
#: library, never the other way round (the wheel ships the library alone).
REPOSITORY_TOOLS = ("demo", "devstack")

#: Packages that must import no Airflow (the front ends only translate into them).
NO_AIRFLOW = ("protocol", "storage", "state", "sources", "ops")
#: Packages that must import no Spark. ops/ may: running an epoch or a gate needs a session.
NO_SPARK = ("protocol", "storage", "state", "sources")
FORBIDDEN = {"airflow": NO_AIRFLOW, "pyspark": NO_SPARK}

#: Known violations allowed while a rework lands, each with its reason. Empty: every
#: module is within bounds. A listed module that is no longer too long fails the test,
#: so an entry cannot outlive its reason; anything unlisted fails at once.
PENDING_ELSEWHERE: dict[str, str] = {}

PROTOCOL = "protocol"
MAX_FUNCTION_LINES = 60
#: Like PENDING_ELSEWHERE, for functions (by file, relative to the project).
FUNCTIONS_PENDING: dict[str, str] = {}
#: The facade and composition root; its collaborators get ports instead of it.
COORDINATOR = "batchpoint.protocol.coordinator"


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. batchpoint.spark.keyed_io
    target: str  # the imported module, e.g. batchpoint.runtime.faults
    site: str  # path:line

    @property
    def source_package(self) -> str:
        return package_of(self.module)

    @property
    def target_package(self) -> str:
        return package_of(self.target)

    def __str__(self) -> str:
        return f"{self.site}: {self.module} imports {self.target}"


def package_of(module: str) -> str:
    """batchpoint.spark.keyed_io -> spark; batchpoint.errors -> errors; batchpoint -> batchpoint."""
    parts = module.split(".")
    return parts[1] if parts[0] == ROOT_PACKAGE and len(parts) > 1 else parts[0]


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted((INCLUDE / ROOT_PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(INCLUDE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


@functools.cache
def _module_names() -> frozenset[str]:
    return frozenset(name for name, _ in modules())


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_runtime(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under `node`, at any depth (functions too), except the bodies of
    `if TYPE_CHECKING:` (their `else:` runs and is kept)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for kept in child.orelse:
                yield kept
                yield from _walk_runtime(kept)
            continue
        yield child
        yield from _walk_runtime(child)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str, path: Path, *, type_checking: bool = False) -> list[Import]:
    """The modules `module` imports; with `type_checking`, those under
    `if TYPE_CHECKING:` too."""
    tree = parse_file(path)
    site = path.relative_to(INCLUDE) if path.is_relative_to(INCLUDE) else path
    found: dict[Import, None] = {}  # one per site and target, in source order
    for node in ast.walk(tree) if type_checking else _walk_runtime(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            # `from batchpoint.spark import keyed_io` imports batchpoint.spark.keyed_io.
            named = [f"{base}.{a.name}" for a in node.names]
            targets = [t if t in _module_names() else base for t in named]
        else:
            continue
        found.update((Import(module, t, f"{site}:{node.lineno}"), None) for t in targets)
    return list(found)


def all_imports(*, type_checking: bool = False) -> list[Import]:
    return [
        i
        for module, path in modules()
        for i in imports_of(module, path, type_checking=type_checking)
    ]


def package_graph(imports: list[Import]) -> dict[str, dict[str, list[Import]]]:
    """package -> imported batchpoint package -> the import sites."""
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        ours = imp.target.split(".")[0] == ROOT_PACKAGE
        if ours and imp.source_package != imp.target_package:
            graph[imp.source_package][imp.target_package].append(imp)
    return graph


def module_graph(imports: list[Import]) -> dict[str, dict[str, list[Import]]]:
    """module -> imported batchpoint module -> the import sites (a package's
    `__init__` is the module named by the package)."""
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        if imp.target.split(".")[0] == ROOT_PACKAGE and imp.target != imp.module:
            graph[imp.module][imp.target].append(imp)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of nodes (packages, modules) that reach each
    other (cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, {})):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def reachable(graph: dict[str, dict[str, list[Import]]], start: str) -> list[list[str]]:
    """One import path from `start` to every package it reaches (itself included)."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph.get(node, {})):
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return list(paths.values())


# -- the checks ---------------------------------------------------------------------------


def test_packages_import_each_other_one_way() -> None:
    problems = cycle_problems(package_graph(all_imports()), "packages")
    assert not problems, "\n".join(problems)


def cycle_problems(graph: dict[str, dict[str, list[Import]]], what: str) -> list[str]:
    problems = []
    for group in strongly_connected(graph):
        problems.append(f"cycle between {what} {', '.join(group)}:")
        problems += [
            f"  {imp}"
            for source in group
            for target in sorted(graph[source])
            if target in group
            for imp in graph[source][target]
        ]
    return problems


def test_modules_import_each_other_one_way() -> None:
    problems = cycle_problems(module_graph(all_imports()), "modules")
    assert not problems, "\n".join(problems)


ARCHITECTURE_DOC = PROJECT / "docs" / "design" / "architecture.md"
FLOOR_SECTION = "## The packages, floor by floor"


def documented_floors(text: str) -> dict[str, int]:
    """package -> floor, from the floor table of architecture.md: a row's first cell is
    its floor, its second names the packages in backquotes (`cli/`, `errors`)."""
    section = text.split(FLOOR_SECTION, 1)[1].split("\n## ", 1)[0]
    floors = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[0].isdigit():
            for name in re.findall(r"`([^`]+)`", cells[1]):
                floors[name.rstrip("/")] = int(cells[0])
    return floors


def floor_problems(imports: list[Import], floors: dict[str, int]) -> list[str]:
    """Each package the table leaves out, and each import that does not go down."""
    graph = package_graph(imports)
    packages = set(graph) | {target for targets in graph.values() for target in targets}
    problems = [f"{p}: not in the floor table" for p in sorted(packages - set(floors))]
    for source in sorted(graph):
        for target, sites in sorted(graph[source].items()):
            if source in floors and target in floors and floors[target] >= floors[source]:
                problems.append(
                    f"{source} (floor {floors[source]}) imports {target} "
                    f"(floor {floors[target]}): {sites[0]}"
                )
    return problems


def test_packages_import_only_lower_floors() -> None:
    floors = documented_floors(ARCHITECTURE_DOC.read_text())
    problems = floor_problems(all_imports(), floors)
    assert not problems, "docs/design/architecture.md's floor table:\n" + "\n".join(problems)


def test_the_protocols_rooms_name_every_protocol_module() -> None:
    """The module table of "The protocol's rooms" places every module of protocol/."""
    section = ARCHITECTURE_DOC.read_text().split("## The protocol's rooms", 1)[1]
    named = set(re.findall(r"`(\w+\.py)`", section.split("\n## ", 1)[0]))
    modules = {p.name for p in (INCLUDE / ROOT_PACKAGE / PROTOCOL).glob("*.py")}
    assert sorted(modules - named - {"__init__.py"}) == []


def test_a_package_missing_from_the_table_and_an_import_upward_are_found() -> None:
    table = f"""{FLOOR_SECTION}

| floor | package | what | imports |
|---|---|---|---|
| 2 | `ops/` | use cases | `protocol` |
| 1 | `protocol/`, `errors` | the protocol | nothing |

## Next
| 9 | `storage/` | not in the section | |
"""
    floors = documented_floors(table)
    assert floors == {"ops": 2, "protocol": 1, "errors": 1}
    imports = [
        Import("batchpoint.protocol.x", "batchpoint.ops.y", "x.py:1"),
        Import("batchpoint.ops.y", "batchpoint.storage.z", "y.py:2"),
    ]
    assert floor_problems(imports, floors) == [
        "storage: not in the floor table",
        "protocol (floor 1) imports ops (floor 2): "
        "x.py:1: batchpoint.protocol.x imports batchpoint.ops.y",
    ]


def coordinator_imports(imports: list[Import]) -> list[Import]:
    """Where a protocol module other than the coordinator imports it."""
    return [
        imp
        for imp in imports
        if package_of(imp.module) == PROTOCOL and imp.module != COORDINATOR
        if imp.target == COORDINATOR
    ]


def test_protocol_collaborators_do_not_import_the_coordinator() -> None:
    """gc, savepoints, restorer, repair, publish, stats (and the trigger, the ack
    accounting, the finalizer, ...) get the store, the layout, the read port, the
    control store, a clock and small ports: none of them holds the coordinator."""
    found = coordinator_imports(all_imports(type_checking=True))
    assert not found, "\n".join(f"{imp}: give it ports instead" for imp in found)


def forbidden_imports(imports: list[Import], library: str, packages: tuple[str, ...]) -> list[str]:
    """Where one of `packages` imports `library`, itself or through batchpoint packages."""
    graph = package_graph(imports)
    direct: dict[str, list[Import]] = defaultdict(list)
    for imp in imports:
        if imp.target.split(".")[0] == library:
            direct[imp.source_package].append(imp)
    problems = []
    for package in packages:
        for path in reachable(graph, package):
            for imp in direct.get(path[-1], []):
                through = f" (through {' -> '.join(path)})" if len(path) > 1 else ""
                problems.append(f"{package} imports {library}{through}: {imp}")
    return problems


@pytest.mark.parametrize("library", sorted(FORBIDDEN))
def test_the_core_does_not_import(library: str) -> None:
    problems = forbidden_imports(all_imports(), library, FORBIDDEN[library])
    assert not problems, "\n".join(problems)


def test_the_library_imports_no_repository_tool() -> None:
    problems = [
        str(i)
        for i in all_imports(type_checking=True)
        if i.target.split(".")[0] in REPOSITORY_TOOLS
    ]
    assert not problems, "\n".join(problems)


def _too_long() -> dict[str, int]:
    out = {}
    for path in _source_files():
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            out[path.relative_to(PROJECT).as_posix()] = lines
    return out


def test_no_module_is_too_long() -> None:
    too_long = _too_long()
    new = {p: n for p, n in too_long.items() if p not in PENDING_ELSEWHERE}
    fixed = sorted(p for p in PENDING_ELSEWHERE if p not in too_long)
    problems = [f"{p}: {n} lines, more than {MAX_LINES}" for p, n in sorted(new.items())]
    problems += [
        f"{p} is {MAX_LINES} lines or fewer now: remove it from PENDING_ELSEWHERE" for p in fixed
    ]
    assert not problems, "\n".join(problems)


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function or method of the file over `limit` lines (decorators aside)."""
    tree = parse_file(path)
    site = path.relative_to(PROJECT) if path.is_relative_to(PROJECT) else path
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                out.append(f"{site}:{node.lineno} {node.name}: {length} lines, more than {limit}")
    return out


def _source_files() -> Iterator[Path]:
    for root in SOURCE_ROOTS:
        yield from sorted(root.rglob("*.py"))


def test_functions_are_short() -> None:
    long = {
        path.relative_to(PROJECT).as_posix(): found
        for path in _source_files()
        if (found := long_functions(path))
    }
    problems = [
        line for p, found in sorted(long.items()) if p not in FUNCTIONS_PENDING for line in found
    ]
    problems += [
        f"{p} has no function over {MAX_FUNCTION_LINES} lines now: remove it from FUNCTIONS_PENDING"
        for p in sorted(FUNCTIONS_PENDING)
        if p not in long
    ]
    assert not problems, "\n".join(problems)


def test_function_level_imports_count_and_type_checking_ones_do_not(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import batchpoint.storage\n"
        "if TYPE_CHECKING:\n"
        "    from batchpoint.runtime import api\n"
        "else:\n"
        "    import batchpoint.errors\n"
        "def f():\n"
        "    from batchpoint.spark import keyed_io\n"
        "    from . import sibling\n"
    )
    found = {i.target for i in imports_of("batchpoint.protocol.mod", source)}
    assert found == {
        "typing",
        "batchpoint.storage",
        "batchpoint.errors",
        "batchpoint.spark.keyed_io",
        "batchpoint.protocol",
    }


def test_a_cycle_is_found_with_its_sites() -> None:
    def imp(a: str, b: str) -> Import:
        return Import(f"batchpoint.{a}.m", f"batchpoint.{b}.m", f"{a}/m.py:1")

    imports = [imp("a", "b"), imp("b", "c"), imp("c", "a"), imp("c", "d")]
    graph = package_graph(imports)
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert ["a", "b", "c", "d"] in reachable(graph, "a")
    hook = Import("batchpoint.d.m", "airflow.hooks.base", "d/m.py:3")
    assert forbidden_imports([*imports, hook], "airflow", ("b",)) == [
        f"b imports airflow (through b -> c -> d): {hook}"
    ]


def test_a_file_cycle_and_a_coordinator_import_are_found(tmp_path: Path) -> None:
    def imp(a: str, b: str) -> Import:
        return Import(f"batchpoint.protocol.{a}", f"batchpoint.protocol.{b}", f"{a}.py:1")

    imports = [imp("gc", "reads"), imp("reads", "control"), imp("control", "gc")]
    imports.append(Import("batchpoint.protocol.gc", "typing", "gc.py:2"))
    graph = module_graph(imports)
    assert strongly_connected(graph) == [
        ["batchpoint.protocol.control", "batchpoint.protocol.gc", "batchpoint.protocol.reads"]
    ]
    assert "typing" not in graph["batchpoint.protocol.gc"]

    source = tmp_path / "gc.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from batchpoint.protocol.coordinator import CheckpointCoordinator\n"
    )
    typed = imports_of("batchpoint.protocol.gc", source, type_checking=True)
    assert [str(i) for i in coordinator_imports(typed)] == [
        f"{source}:3: batchpoint.protocol.gc imports batchpoint.protocol.coordinator"
    ]
    assert coordinator_imports(imports_of("batchpoint.protocol.gc", source)) == []
    itself = Import(COORDINATOR, COORDINATOR, "coordinator.py:1")
    assert coordinator_imports([itself]) == []


def test_a_long_function_is_found(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(3))
    source.write_text(f"class A:\n    def short(self):\n        pass\n\ndef long():\n{body}")
    assert long_functions(source, limit=3) == [f"{source}:5 long: 4 lines, more than 3"]
