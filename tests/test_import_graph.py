"""The import graph of ``src/dsh`` has no cycles, and ``dsh.session`` depends on nothing else.

Every ``import`` counts, including ones inside functions and under ``TYPE_CHECKING``: a cycle
hidden in a function body is still a cycle in the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dsh"

# Known cycles still to break, each with the module pair. Empty it when they are gone.
ALLOWED_CYCLES: set[frozenset[str]] = set()
# What dsh.session may import from the rest of dsh: private leaf helpers only.
SESSION_MAY_IMPORT = {"dsh._json", "dsh._clock"}


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    submodule = f"{target}.{alias.name}"
                    if submodule in modules:
                        graph[name].add(submodule)
                    elif target in modules:
                        graph[name].add(target)
    for name in graph:
        graph[name].discard(name)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iteratively; components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


@pytest.mark.slow
def test_the_import_graph_has_no_cycles() -> None:
    cycles = [c for c in strongly_connected(import_graph()) if frozenset(c) not in ALLOWED_CYCLES]
    assert cycles == [], f"import cycles: {[sorted(c) for c in cycles]}"


def test_the_checker_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [{"a", "b", "c"}]


def test_session_imports_nothing_else_of_dsh() -> None:
    graph = import_graph()
    outside = {
        (name, target)
        for name, targets in graph.items()
        if name == "dsh.session" or name.startswith("dsh.session.")
        for target in targets
        if not (target == "dsh.session" or target.startswith("dsh.session.")) and target not in SESSION_MAY_IMPORT
    }
    assert outside == set()
