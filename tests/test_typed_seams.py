"""Inside ``src/dsh`` every service is looked up by typed key (``ctx.require(KEY)``), never through
``Context.__getattr__`` (``ctx.tools``), which is invisible to mypy and to the import graph.

The check parses every module and flags an attribute read on a context expression that is not a
real member of :class:`~dsh.runtime.Context`. A context expression is a name or attribute called
``ctx``/``_ctx``, a name annotated as ``Context`` in the enclosing function, an attribute that a
module annotates as or assigns from a context, and ``.root``/``.scoped(...)`` of one.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from dsh.runtime import Context

SRC = Path(__file__).resolve().parents[1] / "src" / "dsh"

# Files still allowed to use attribute sugar (none left).
ALLOWED_FILES: frozenset[str] = frozenset()

MEMBERS = frozenset(dir(Context)) | {
    name for cls in Context.__mro__ for name in getattr(cls, "__annotations__", {})
}
CONTEXT_NAMES = frozenset({"ctx", "_ctx"})
# Members that hand back another view of the same root.
RETURNS_CONTEXT = frozenset({"root", "scoped"})
_ANNOTATION = re.compile(r"\bContext\b")


def _annotated(annotation: ast.expr | None) -> bool:
    return annotation is not None and bool(_ANNOTATION.search(ast.unparse(annotation)))


def _class_level_context(stmt: ast.stmt) -> str | None:
    """The name a class body declares as a context (``ctx: Context``, a property returning one)."""
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id if _annotated(stmt.annotation) else None
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _annotated(stmt.returns):
        is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in stmt.decorator_list)
        return stmt.name if is_property else None
    return None


class _Finder:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.attrs: set[str] = set(CONTEXT_NAMES)
        self.found: list[tuple[int, str]] = []

    def is_context(self, node: ast.expr, names: frozenset[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.Attribute):
            if node.attr in self.attrs:
                return True
            return node.attr in RETURNS_CONTEXT and self.is_context(node.value, names)
        if isinstance(node, ast.Call):
            return self.is_context(node.func, names)
        return False

    def collect_attrs(self) -> None:
        """Attributes the module declares or assigns as contexts (``self._root = ctx``)."""
        for cls in (n for n in ast.walk(self.tree) if isinstance(n, ast.ClassDef)):
            self.attrs.update(filter(None, map(_class_level_context, cls.body)))
        assignments: list[tuple[ast.Assign, frozenset[str]]] = []
        for fn in (n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            names = CONTEXT_NAMES | self._local_names(fn)
            for node in ast.walk(fn):
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute):
                    if _annotated(node.annotation):
                        self.attrs.add(node.target.attr)
                elif isinstance(node, ast.Assign):
                    assignments.append((node, names))
        for _ in range(3):  # assignments chain (``self.a = ctx``; ``self.b = self.a``)
            for node, names in assignments:
                if self.is_context(node.value, names):
                    self.attrs.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))

    @staticmethod
    def _local_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
        args = fn.args
        names = {
            a.arg
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
            if _annotated(a.annotation)
        }
        names.update(
            n.target.id
            for n in ast.walk(fn)
            if isinstance(n, ast.AnnAssign)
            and isinstance(n.target, ast.Name)
            and _annotated(n.annotation)
        )
        return frozenset(names)

    def visit(self, node: ast.AST, names: frozenset[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = names | self._local_names(node)
        if (
            isinstance(node, ast.Attribute)
            and node.attr not in MEMBERS
            and self.is_context(node.value, names)
        ):
            self.found.append((node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            self.visit(child, names)


def sugar_uses(path: Path) -> list[str]:
    """``line: expression`` for each service looked up through ``Context.__getattr__``."""
    finder = _Finder(ast.parse(path.read_text(), str(path)))
    finder.collect_attrs()
    finder.visit(finder.tree, CONTEXT_NAMES)
    return [f"{line}: {text}" for line, text in sorted(set(finder.found))]


@functools.cache
def _uses_by_file() -> dict[str, list[str]]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        uses = sugar_uses(path)
        if uses:
            found[path.relative_to(SRC).as_posix()] = uses
    return found


def test_no_service_is_looked_up_through_context_attribute_sugar() -> None:
    offenders = {f: uses for f, uses in _uses_by_file().items() if f not in ALLOWED_FILES}
    assert offenders == {}, "use ctx.require(KEY) / ctx.get(KEY) with a typed ServiceKey"


def test_allowlist_holds_only_files_that_still_need_it() -> None:
    stale = sorted(f for f in ALLOWED_FILES if f not in _uses_by_file())
    assert stale == [], "remove these from ALLOWED_FILES"


def test_the_check_sees_sugar(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from dsh.runtime import Context\n"
        "def apply(ctx, config):\n"
        "    ctx.defer(ctx.tools.register(x))\n"
        "class App:\n"
        "    def __init__(self, host: Context) -> None:\n"
        "        self._root = host\n"
        "        host.require(KEY)\n"
        "    def run(self) -> None:\n"
        "        self._root.llm.models()\n"
        "        self._root.root.agents\n"
        "        self._root.scoped(s).sessions\n"
    )
    assert [u.split(": ")[1] for u in sugar_uses(module)] == [
        "ctx.tools",
        "self._root.llm",
        "self._root.root.agents",
        "self._root.scoped(s).sessions",
    ]
