"""The package's own modules import one another in one direction: no cycle (counting
imports made only for type checking), and every import at the top of its module, none
inside a function."""

from __future__ import annotations

import ast
import os

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mutexd")


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def modules() -> dict[str, ast.Module]:
    return {
        name[:-3]: ast.parse(read(os.path.join(PACKAGE, name)), name)
        for name in sorted(os.listdir(PACKAGE))
        if name.endswith(".py")
    }


def own_imports(tree: ast.Module, names: set[str]) -> set[str]:
    """The package's modules that ``tree`` imports, wherever the import is."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # from . import _x
                found.update(a.name for a in node.names if a.name in names)
    return found


def test_no_import_cycle() -> None:
    trees = modules()
    graph = {name: own_imports(tree, set(trees)) for name, tree in trees.items()}
    assert "_client" in graph and "_lock" in graph and "_leader" in graph
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, path + [name])
        done.add(name)

    for name in graph:
        visit(name, [])


def test_no_import_inside_a_function() -> None:
    for name, tree in modules().items():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    assert not isinstance(node, (ast.Import, ast.ImportFrom)), \
                        "%s.py:%d imports inside %s()" % (name, node.lineno, fn.name)
