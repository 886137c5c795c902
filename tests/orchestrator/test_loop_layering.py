"""The loop's shape, enforced: its modules and the models import one another without cycles, nothing
imports `AiService` back, models never import the result type, and every module stays small."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import orchestrator

ROOT = Path(orchestrator.__file__).parent
# The loop and what it is made of: the sub-package, the service, its events, handlers, providers, search.
LOOP = ("orchestrator.loop", "orchestrator.models", "orchestrator.service", "orchestrator.result")
LOOP += ("orchestrator.handlers", "orchestrator.providers", "orchestrator.search")
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = ["orchestrator", *path.relative_to(ROOT).with_suffix("").parts]
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The orchestrator modules `name` imports, anywhere in it (functions and TYPE_CHECKING included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from package import submodule` imports the submodule; any other name comes from `base`
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _in_loop(name: str) -> bool:
    return any(name == part or name.startswith(part + ".") for part in LOOP)


def _cycle_through(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A chain of imports from `start` back to itself, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        name, chain = stack.pop()
        for target in graph[name]:
            if target == start:
                return [*chain, start]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*chain, target]))
    return None


def test_the_loop_and_the_models_import_one_another_without_cycles() -> None:
    # given the imports of every orchestrator module
    graph = _graph()

    # when each module of the loop is followed through the loop's modules
    cycles = [cycle for name in graph if _in_loop(name) and (cycle := _cycle_through(name, graph))]

    # then none leads back to where it started
    assert cycles == []


def test_nothing_in_the_loop_imports_the_service_back() -> None:
    graph = _graph()

    importers = sorted(name for name, targets in graph.items() if "orchestrator.service" in targets)

    assert [name for name in importers if _in_loop(name) or name.startswith("orchestrator._")] == []


def test_models_never_import_the_result_type() -> None:
    graph = _graph()

    importers = sorted(
        name
        for name, targets in graph.items()
        if name.startswith("orchestrator.models") and "orchestrator.result" in targets
    )

    assert importers == []


@pytest.mark.parametrize("name", sorted(name for name in _modules() if _in_loop(name)))
def test_every_module_of_the_loop_stays_small(name: str) -> None:
    lines = len(_modules()[name].read_text().splitlines())

    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it by job"
