"""oc_repl's modules import each other without cycles, by this rule:

- A room is a subpackage of oc_repl (oc_repl.cli, oc_repl.protocols, oc_repl.bench, ...) or a module at its top
  (oc_repl.api, oc_repl.config, ...). Between rooms, every import counts, at module level or inside a function: a lazy
  import still makes the importer depend on what it imports whenever it runs (the API reaching into the CLI to
  rebuild flags was a dependency, however late it was imported). The rooms must form no cycle.
- Inside a room, only module-level imports count, and they must form no cycle (one would fail at import time,
  depending on which module is imported first). A room's function-level imports of its own modules may close a
  cycle: that is how a registry loads the implementation a name asks for (`protocols.create`, `tasks.load_task`),
  the implementation importing the registry's shared types; it runs after both modules are complete.
- Imports under `if TYPE_CHECKING:` never run and do not count. `import a.b.c` and `from a.b import c` (c a module)
  are an edge to a.b.c alone: the parents run first, but a package whose __init__ imports its submodules only when
  called depends on nothing by that.
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
    """(module imported, at module level) for each import of an oc_repl module that runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def module(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def walk(node: ast.AST, top: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from walk(ast.Module(body=child.orelse, type_ignores=[]), top)
                continue
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
    """(the module-level imports of every module, the imports between rooms)."""
    known = modules()
    top: dict[str, set[str]] = {}
    rooms: dict[str, set[str]] = {}
    for name, path in known.items():
        for imported, at_top in imports(name, path, known):
            if at_top:
                top.setdefault(name, set()).add(imported)
            if room(imported) != room(name):
                rooms.setdefault(room(name), set()).add(room(imported))
    return top, rooms


def test_no_module_imports_itself_in_a_cycle():
    top, rooms = graphs()
    assert "oc_repl.cli" in rooms and "oc_repl.session" in rooms["oc_repl.cli"]  # the graph is the package's
    assert cycle(top) == []
    assert cycle(rooms) == []


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import_across_rooms(tmp_path):
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nimport oc_repl.config\nif TYPE_CHECKING:\n    import oc_repl.api\n"
        "def f():\n    from oc_repl.cli import main\n"
    )
    found = set(imports("oc_repl.m", source, {**modules(), "oc_repl.m": source}))
    assert found == {("oc_repl.config", True), ("oc_repl.cli", False)}
