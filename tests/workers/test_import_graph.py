"""The shape of the imports: no cycle among the modules of `workers`, and the orchestrator reads the wire
contract from `workers.protocol`, never from the modules of its Celery tasks."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The Celery tasks' own modules: an orchestrator dispatches tasks, it never loads their code.
TASK_MODULES = {"workers.runtime.tasks", "workers.runtime._compensation", "workers._failures"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, package: str) -> set[str]:
    """Every module `path` imports, at any depth of its code (`from a import b` counts `a` and `a.b`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name == package or name.startswith(package + ".")}


def _graph(package: str) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in (ROOT / package).rglob("*.py")}
    return {name: _imports(path, package) & modules.keys() - {name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_workers_has_no_import_cycle() -> None:
    graph = _graph("workers")
    # A package's `__init__` re-exports its modules: importing a module through its package is no cycle.
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not name.startswith(t + ".")}

    assert _cycles(graph) == []


def test_the_orchestrator_imports_no_task_module_of_workers() -> None:
    offenders = {
        name: sorted(targets & TASK_MODULES)
        for name, targets in _graph_of_files(ROOT / "orchestrator").items()
        if targets & TASK_MODULES
    }

    assert offenders == {}


def _graph_of_files(folder: Path) -> dict[str, set[str]]:
    return {_module_name(p): _imports(p, "workers") for p in folder.rglob("*.py")}
