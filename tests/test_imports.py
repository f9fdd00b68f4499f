"""oc_repl's modules import each other without cycles, every import counted: at module level, inside a function (a
lazy import still makes the importer depend on what it imports whenever it runs), and under `if TYPE_CHECKING:` (the
types a module is written against are part of what it depends on). A module that needs something of the one that uses
it declares it as a `typing.Protocol` of its own; a registry names the implementation a name asks for as a
"module:name" string (oc_repl/lazy.py), imported when chosen, never by an import statement.

- The modules form no cycle, and neither do the rooms: a room is a subpackage of oc_repl (oc_repl.cli,
  oc_repl.protocols, oc_repl.bench, ...) or a module at its top (oc_repl.api, oc_repl.config, ...).
- `import a.b.c` and `from a.b import c` (c a module) are an edge to a.b.c alone: the parents run first, but a
  package whose __init__ imports its submodules only when called depends on nothing by that.
- The parts (protocols, sandboxes, the client and its wires, task formats) never import the settings table or the
  deviations table: a part is given its own kind's settings and the deviations in force.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "oc_repl"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, bool]]:
    """(module imported, at module level) for each import of an oc_repl module, `TYPE_CHECKING` ones included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def module(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def walk(node: ast.AST, top: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                yield from ((found, top) for alias in child.names if (found := module(alias.name)))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*up, *([child.module] if child.module else [])])
                for alias in child.names:
                    found = module(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
                    if found:
                        yield found, top
            inner = top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from walk(child, inner)

    yield from (pair for pair in walk(ast.parse(path.read_text(encoding="utf-8")), True) if pair[0] != name)


def room(name: str) -> str:
    return ".".join(name.split(".")[:2])


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph ([] when there is none), as the path around it."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(every import of every module, the imports between rooms)."""
    known = modules()
    every: dict[str, set[str]] = {}
    rooms: dict[str, set[str]] = {}
    for name, path in known.items():
        for imported, _ in imports(name, path, known):
            every.setdefault(name, set()).add(imported)
            if room(imported) != room(name):
                rooms.setdefault(room(name), set()).add(room(imported))
    return every, rooms


def test_no_module_imports_itself_in_a_cycle_counting_lazy_and_type_only_imports():
    every, rooms = graphs()
    assert "oc_repl.cli" in rooms and "oc_repl.session" in rooms["oc_repl.cli"]  # the graph is the package's
    assert "oc_repl.agent" in every["oc_repl.thread_events"]  # a type-only import counts
    assert cycle(every) == []
    assert cycle(rooms) == []


PARTS = ("oc_repl.protocols", "oc_repl.sandbox", "oc_repl.client", "oc_repl.tasks", "oc_repl.hostns")


def test_no_part_imports_the_settings_or_the_deviations_table():
    every, _ = graphs()
    found = sorted(
        f"{name} imports {imported}"
        for name, imported_set in every.items()
        if name.startswith(PARTS)
        for imported in imported_set & {"oc_repl.config", "oc_repl.deviations"}
    )
    assert found == []


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import_across_rooms(tmp_path):
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nimport oc_repl.config\nif TYPE_CHECKING:\n    import oc_repl.api\n"
        "def f():\n    from oc_repl.cli import main\n"
    )
    found = set(imports("oc_repl.m", source, {**modules(), "oc_repl.m": source}))
    assert found == {("oc_repl.config", True), ("oc_repl.api", True), ("oc_repl.cli", False)}
