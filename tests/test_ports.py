"""The front ends take ports, never the coordinator (read from the source with `ast`).

- Outside protocol/, only the composition roots (what builds a coordinator and hands it
  on) name `CheckpointCoordinator` in a signature or a field; a use case takes the port
  it uses (protocol/pipeline_ports.py).
- Nothing outside protocol/ reaches a coordinator's store, layout or control store.
- No port but the coordinator has a public `store`, `layout` or `control`.
- No protocol collaborator takes the store or the layout beside a port that holds them
  (`reads`, `records`, `files`): it asks the port.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from support.python_source import parse, parse_file

PACKAGE = Path(__file__).resolve().parents[1] / "include" / "batchpoint"
COORDINATOR = "CheckpointCoordinator"
RAW_PARTS = ("store", "layout", "control")
#: The parameters that name a port over the store and the layout.
PORTS_HOLDING_RAW_PARTS = ("reads", "records", "files")

#: Where a coordinator is built, and the functions that hand the one built on: the
#: only signatures outside protocol/ that may name it.
COMPOSITION_ROOTS = {
    "airflow/hooks.py": {"coordinator"},
    "airflow/mixins.py": {"coordinator"},
    "airflow/triggers.py": {"_coordinator"},
    "cli/context.py": {"coordinator", "coordinator_of"},
    "ops/dataframes.py": {"_open"},
    "ops/pipelines.py": {"open_pipeline", "stored_coordinator"},
}


def _library_files() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("protocol/"):
            continue
        yield relative, parse_file(path, relative)


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.expr]:
    args = node.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if arg is not None and arg.annotation is not None:
            yield arg.annotation
    if node.returns is not None:
        yield node.returns


def coordinator_signatures(relative: str, tree: ast.Module) -> list[str]:
    """`file:line name` of each function or class field outside the roots whose
    annotation names the coordinator."""
    allowed = COMPOSITION_ROOTS.get(relative, set())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            named = any(COORDINATOR in ast.unparse(a) for a in _annotations(node))
            if named and node.name not in allowed:
                found.append(f"{relative}:{node.lineno} {node.name}")
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and COORDINATOR in ast.unparse(item.annotation):
                    found.append(f"{relative}:{item.lineno} {node.name}.{ast.unparse(item.target)}")
    return found


def reach_throughs(relative: str, tree: ast.Module) -> list[str]:
    """`file:line expression` of each `<...coordinator>.store|layout|control`."""
    through = re.compile(r"(^|\.)(coordinator|_coordinator|c)$")  # `c`: its usual short name
    return [
        f"{relative}:{node.lineno} {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in RAW_PARTS
        and through.search(ast.unparse(node.value))
    ]


def public_raw_parts(path: Path) -> list[str]:
    return public_raw_parts_of(parse_file(path))


def _attrs_fields(cls: ast.ClassDef) -> list[str]:
    """The attribute names an attrs class (`@define(...)`) declares, underscore kept."""
    decorated = any("define" in ast.unparse(d) for d in cls.decorator_list)
    return [
        item.target.id
        for item in cls.body
        if decorated and isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    ]


def public_raw_parts_of(tree: ast.Module) -> list[str]:
    """`Class.part` for each `self.store|layout|control = ...` in a class, or a public
    field of that name in an attrs class."""
    found = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        found += [f"{cls.name}.{name}" for name in _attrs_fields(cls) if name in RAW_PARTS]
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [
                    f"{cls.name}.{t.attr}"
                    for t in targets
                    if isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and t.attr in RAW_PARTS
                ]
    return found


def raw_parts_beside_a_port(tree: ast.Module) -> list[str]:
    """`Class(parameter)` for each `store` or `layout` parameter of a constructor that
    also takes a port holding them (an attrs class's parameters are its fields, the
    leading underscore dropped)."""
    found = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        names = {name.lstrip("_") for name in _attrs_fields(cls)}
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                args = node.args
                names |= {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        if names & set(PORTS_HOLDING_RAW_PARTS):
            found += [f"{cls.name}({n})" for n in ("store", "layout") if n in names]
    return found


def test_only_the_composition_roots_take_the_coordinator() -> None:
    found = [site for f, tree in _library_files() for site in coordinator_signatures(f, tree)]
    assert found == [], "take a port of protocol/pipeline_ports.py instead:\n" + "\n".join(found)


def test_nothing_outside_the_protocol_reaches_through_a_coordinator() -> None:
    found = [site for f, tree in _library_files() for site in reach_throughs(f, tree)]
    assert found == [], "ask a port for it instead:\n" + "\n".join(found)


def test_no_port_shows_its_store_layout_or_control() -> None:
    found = {
        path.name: parts
        for path in sorted((PACKAGE / "protocol").glob("*.py"))
        if path.name != "coordinator.py" and (parts := public_raw_parts(path))
    }
    assert found == {}


def test_no_collaborator_takes_the_store_or_layout_beside_a_port() -> None:
    found = {
        path.name: parts
        for path in sorted((PACKAGE / "protocol").glob("*.py"))
        if (parts := raw_parts_beside_a_port(parse_file(path)))
    }
    assert found == {}, "ask the records or files port instead"


def test_raw_parts_beside_a_port_are_found() -> None:
    source = """
class Twice:
    def __init__(self, *, store, layout, reads): ...

class Raw:
    def __init__(self, *, store, layout, clock): ...

class Port:
    def __init__(self, store, layout): ...

class Narrow:
    def __init__(self, *, records, files): ...

@define(kw_only=True)
class Declared:
    _reads: CheckpointReads
    _layout: PipelineLayout
"""
    assert raw_parts_beside_a_port(parse(source)) == [
        "Twice(store)",
        "Twice(layout)",
        "Declared(layout)",
    ]


def test_each_check_finds_what_it_looks_for() -> None:
    source = """
class Env:
    coordinator: CheckpointCoordinator

    def __init__(self, store):
        self.store = store

def use(coordinator: CheckpointCoordinator) -> None:
    coordinator.layout.head
    env.coordinator.store.get("k")

def coordinator(settings) -> CheckpointCoordinator: ...

@define
class Shown:
    control: ControlStore
    _layout: PipelineLayout
"""
    tree = parse(source)
    assert sorted(coordinator_signatures("ops/x.py", tree)) == [
        "ops/x.py:12 coordinator",
        "ops/x.py:3 Env.coordinator",
        "ops/x.py:8 use",
    ]
    assert sorted(coordinator_signatures("airflow/hooks.py", tree)) == [
        "airflow/hooks.py:3 Env.coordinator",
        "airflow/hooks.py:8 use",
    ]
    assert public_raw_parts_of(tree) == ["Env.store", "Shown.control"]
    assert sorted(reach_throughs("ops/x.py", tree)) == [
        "ops/x.py:10 env.coordinator.store",
        "ops/x.py:9 coordinator.layout",
    ]
