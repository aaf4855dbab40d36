"""The Python package's module structure: no import cycle between its modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "vmio"


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules a module imports when it is loaded: its top-level imports (also
    those under `if`/`try` at top level), not those inside functions or classes. `from vmio
    import x` names the submodule `vmio.x` when there is one, else the package itself."""
    found: set[str] = set()
    body = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If | ast.Try):
            body += node.body + node.orelse + getattr(node, "finalbody", [])
            body += [s for h in getattr(node, "handlers", []) for s in h.body]
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            found |= subs & modules
            if subs - modules:
                found.add(node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {
        ("vmio" if p.stem == "__init__" else f"vmio.{p.stem}"): p for p in PACKAGE.glob("*.py")
    }
    return {name: module_imports(path, set(files)) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_modules_import_each_other_without_a_cycle():
    graph = import_graph()
    assert {"vmio.study", "vmio.runner", "vmio.plot", "vmio.experiment"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_sees_a_cycle_through_several_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_plot_and_tables_never_import_the_runner():
    graph = import_graph()
    for module in ("vmio.plot", "vmio.tables", "vmio.calibration", "vmio.experiment"):
        assert "vmio.runner" not in graph[module] and "vmio.study" not in graph[module]
