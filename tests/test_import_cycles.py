"""The product packages import in one direction: no module of `workers` or `orchestrator` imports itself
back through any chain of imports.

Every import statement counts, wherever it stands: at the top of a module, inside a function (a lazy
import only postpones the cycle) and under `if TYPE_CHECKING:` (the modules still know each other). An
import of a package counts as an import of its `__init__.py`; the parent packages a dotted import runs
first do not count, since every submodule would otherwise close a cycle with its own package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workers", "orchestrator")


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of `packages` below `root`, by dotted name (a package by its own name)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest known module that `name` names or lies inside (`a.b.Name` -> `a.b`)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The known modules that `module` imports, by any import statement anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from pkg import name`: `name` is a submodule when one exists, else a name of `pkg`.
            targets = [f"{prefix}.{alias.name}" for alias in node.names] or [prefix]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    modules = module_files(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, each sorted, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop(0)
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def cycle_through(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    """One shortest import chain from the component's first module back to itself, for the message."""
    members = set(component)
    start = component[0]
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {component}")  # a component always has one


def describe_cycles(graph: Mapping[str, set[str]]) -> list[str]:
    lines = []
    for component in strongly_connected(graph):
        chain = " -> ".join(cycle_through(graph, component))
        lines.append(
            f"{len(component)} modules import each other ({', '.join(component)}); for example {chain}"
        )
    return lines


def test_the_product_packages_have_no_import_cycle() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert "orchestrator.service" in graph and "workers.runtime.tasks" in graph, "the walk found the packages"
    cycles = describe_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# The walker itself, on small trees where the answer is known.


def _tree(root: Path, files: Mapping[str, str]) -> None:
    """Writes `files` below `root`, and an empty `p/__init__.py` unless `files` has one."""
    for name, source in {"p/__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"p/a.py": "import p.b\n", "p/b.py": "from p import c\n", "p/c.py": ""},
            [],
            id="a chain is no cycle",
        ),
        pytest.param(
            {"p/a.py": "from p.b import X\n", "p/b.py": "from p.a import Y\n"},
            [["p.a", "p.b"]],
            id="two modules import names of each other",
        ),
        pytest.param(
            {
                "p/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import X\n",
                "p/b.py": "def f():\n    from . import a\n",
            },
            [["p.a", "p.b"]],
            id="type-checking and lazy imports count",
        ),
        pytest.param(
            {
                "p/q/__init__.py": "from .m import Z\n",
                "p/q/m.py": "from ..a import Y\n",
                "p/a.py": "from p.q import Z\n",
            },
            [["p.a", "p.q", "p.q.m"]],
            id="relative imports and packages resolve",
        ),
        pytest.param(
            {
                "p/__init__.py": "from p.a import X\n",
                "p/a.py": "import os\nimport p.b\n",
                "p/b.py": "X = 1\n",
            },
            [],
            id="a submodule does not import its parent package by being imported",
        ),
    ],
)
def test_the_walker_finds_exactly_the_cycles_of_a_tree(
    tmp_path: Path, files: Mapping[str, str], expected: list[list[str]]
) -> None:
    _tree(tmp_path, files)
    graph = import_graph(tmp_path, ["p"])
    assert strongly_connected(graph) == expected
    for component, line in zip(expected, describe_cycles(graph), strict=True):
        first = component[0]
        assert f"for example {first} -> " in line and line.endswith(f" -> {first}")
