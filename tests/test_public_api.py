"""The public faces of `workers` and `orchestrator`: each `__all__` listing public names once, the
DESIGN.md contract, the names the README and the docs pages import, every class and function of the
modules `orchestrator` re-exports whole, every package's `__all__` against what it defines, and import
isolation."""

import __future__

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import FunctionType, ModuleType

import pytest

import orchestrator
import orchestrator.models.base
import workers

ROOT = Path(__file__).resolve().parent.parent

DESIGN_CONTRACT = [
    "tool",
    "Param",
    "compensate_for",
    "ToolSpecification",
    "tool_specifications_from",
    "ReturnBehavior",
    "SearchBehavior",
    "InvocationParameters",
    "InvocationContext",
    "ToolMemoryId",
    "ToolErrorVisibleToLlm",
    "Image",
    "TextContent",
    "ImageContent",
    "ToolExecution",
]


@pytest.mark.parametrize("package", [workers, orchestrator], ids=lambda package: package.__name__)
def test_all_lists_each_public_name_once(package: ModuleType) -> None:
    exported = package.__all__

    assert len(set(exported)) == len(exported)
    assert [name for name in exported if name.startswith("_") or not hasattr(package, name)] == []
    assert [name for name in exported if isinstance(getattr(package, name), ModuleType)] == []


def test_workers_all_is_sorted() -> None:
    assert sorted(workers.__all__) == workers.__all__


@pytest.mark.parametrize("name", DESIGN_CONTRACT)
def test_design_contract_name_is_importable_from_workers(name: str) -> None:
    # when
    namespace: dict[str, object] = {}
    exec(f"from workers import {name}", namespace)

    # then
    assert namespace[name] is getattr(workers, name)
    assert name in workers.__all__


def test_importing_workers_imports_neither_orchestrator_nor_celery() -> None:
    # given: a fresh interpreter, so nothing imported by other tests counts
    code = "import sys, workers; print('orchestrator' in sys.modules, 'celery' in sys.modules)"

    # when
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )

    # then
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "False False"


ORCHESTRATOR_CONTRACT = [
    "AiService",
    "Result",
    "ToolExecution",
    "SystemMessage",
    "UserMessage",
    "AiMessage",
    "ToolExecutionRequest",
    "ToolExecutionResultMessage",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "PartialResponse",
    "PartialToolCall",
    "CompleteToolCall",
    "CompleteResponse",
    "ScriptedChatModel",
    "OpenAiChatModel",
    "AnthropicChatModel",
    "LocalExecutor",
    "CeleryExecutor",
    "ChatMemory",
    "MessageWindowChatMemory",
    "SqlChatMemoryStore",
    "ToolProvider",
    "ToolProviderRequest",
    "ToolProviderResult",
    "AiServiceTool",
    "SimpleToolSearchStrategy",
    "VectorToolSearchStrategy",
    "ToolSearchStrategy",
    "ToolArgumentsErrorHandler",
    "ToolExecutionErrorHandler",
    "ToolErrorContext",
    "ToolErrorHandlerResult",
]


def test_orchestrator_exports_every_contract_name() -> None:
    import orchestrator

    missing = [name for name in ORCHESTRATOR_CONTRACT if name not in orchestrator.__all__]
    assert missing == []
    for name in orchestrator.__all__:
        assert getattr(orchestrator, name) is not None


@pytest.mark.parametrize(
    "module",
    [orchestrator.errors, orchestrator.memory, orchestrator.models.base, orchestrator.providers],
    ids=lambda module: module.__name__,
)
def test_orchestrator_exports_every_class_and_function_these_modules_define(module: ModuleType) -> None:
    # given: what the module itself defines, read from its namespace rather than from its `__all__`
    defined = {
        name: value
        for name, value in vars(module).items()
        if not name.startswith("_")
        and isinstance(value, type | FunctionType)
        and value.__module__ == module.__name__
    }
    # then: every one of them is importable from `orchestrator`, as the very same object
    assert defined
    assert {name: getattr(orchestrator, name, None) for name in defined} == defined
    assert set(defined) <= set(orchestrator.__all__)


def test_tool_execution_is_one_class_on_both_sides() -> None:
    import orchestrator
    import workers

    assert orchestrator.ToolExecution is workers.ToolExecution
    assert orchestrator.ToolExecutionRequest is workers.ToolExecutionRequest


def test_tool_call_identity_is_one_class_on_both_sides() -> None:
    import orchestrator
    import workers

    assert orchestrator.ToolCallIdentity is workers.ToolCallIdentity


def test_what_constructors_take_or_give_is_importable_from_orchestrator() -> None:
    # `AiService(journal=Journal(url))`, `OpenAiChatModel(retry=RetryPolicy(...))` and the events of
    # `CeleryExecutor(on_call=...)`: the very classes, not copies
    from orchestrator import CallEvent, Journal, RetryPolicy
    from orchestrator.executors._call_events import CallEvent as call_event
    from orchestrator.models._http import RetryPolicy as retry_policy
    from orchestrator.saga.journal import Journal as journal

    assert (Journal, RetryPolicy, CallEvent) == (journal, retry_policy, call_event)


DOCUMENTATION = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _documented_imports() -> list[str]:
    """The imports of toolfleet's packages the README and the docs pages show."""
    text = "\n".join(page.read_text() for page in DOCUMENTATION)
    blocks = re.findall(r"^ *```python\n(.*?)^ *```", text, re.MULTILINE | re.DOTALL)
    in_blocks = [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if re.match(r"\s*from (orchestrator|workers)\S* import ", line)
    ]
    # and those the prose shows inline: `from orchestrator import RetryPolicy`
    inline = re.findall(r"`(from (?:orchestrator|workers)\S* import [^`]+)`", text)
    return sorted(set(in_blocks + inline))


def test_the_documentation_shows_imports() -> None:
    assert len(DOCUMENTATION) > 10, "the docs pages were found"
    assert len(_documented_imports()) >= 5


@pytest.mark.parametrize("statement", _documented_imports())
def test_every_import_the_documentation_shows_works(statement: str) -> None:
    # when / then: no ImportError
    exec(statement, {})


def _packages() -> list[str]:
    names = []
    for top in (workers, orchestrator):
        names.append(top.__name__)
        names += [info.name for info in pkgutil.walk_packages(top.__path__, f"{top.__name__}.") if info.ispkg]
    return names


def _public_names(module: ModuleType) -> set[str]:
    """What a package's namespace offers: names without an underscore that are not submodules."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, ModuleType | __future__._Feature)
    }


def test_the_packages_are_found() -> None:
    assert {"workers", "orchestrator", "orchestrator.saga", "orchestrator.cli"} <= set(_packages())


@pytest.mark.parametrize("name", _packages())
def test_a_package_exports_exactly_the_public_names_it_defines(name: str) -> None:
    # given: the package, its submodules loaded (they become attributes, and are not names it exports)
    package = importlib.import_module(name)
    # when
    exported = getattr(package, "__all__", [])
    # then: nothing public left out of `__all__`, nothing in it undefined, nothing twice
    assert sorted(exported) == sorted(_public_names(package))
    assert len(set(exported)) == len(exported)


@pytest.mark.parametrize(
    "name",
    [
        "Journal",
        "RetryPolicy",
        "CallEvent",
        "HallucinatedToolNameError",
        "RemoteToolError",
        "SystemToolError",
        "SchemaError",
        "JournalKeyError",
        "InvocationState",
        "CallState",
        "CompensationState",
    ],
)
def test_what_users_handle_is_importable_from_orchestrator(name: str) -> None:
    assert name in orchestrator.__all__
    assert getattr(orchestrator, name).__name__ == name


def test_journal_states_are_their_stored_texts() -> None:
    # given: the states as the journal's rows hold them (`cancelled` came with cancellation, `paused`
    # and the approvals' states with human approvals)
    stored = {
        orchestrator.InvocationState: {
            "running",
            "paused",
            "compensating",
            "succeeded",
            "failed",
            "cancelled",
        },
        orchestrator.ApprovalState: {"pending", "approved", "rejected", "expired", "cancelled"},
        orchestrator.CallState: {
            "dispatched",
            "succeeded",
            "failed",
            "compensated",
            "compensation_failed",
            "kept",
            "abandoned",
        },
        orchestrator.CompensationState: {"pending", "running", "succeeded", "failed"},
    }
    for enum, texts in stored.items():
        # then: one member per text, each equal to (and formatted as) its text
        assert {member.value for member in enum} == texts
        assert all(member == member.value and f"{member}" == member.value for member in enum)


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The orchestrator modules a module imports when it is imported (not under `TYPE_CHECKING`, not
    inside functions)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    found.add(child if child in modules else node.module)
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.ClassDef):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return found & modules


def test_orchestrator_modules_import_one_another_without_cycles() -> None:
    # given: the import graph of the orchestrator's modules
    paths = {}
    for path in (ROOT / "orchestrator").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _runtime_imports(path, set(paths)) - {name} for name, path in paths.items()}
    # when: a depth-first walk looks for an edge back to a module on its current path
    cycles: list[list[str]] = []
    done: set[str] = set()

    def walk(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append([*trail[trail.index(name) :], name])
            return
        if name in done:
            return
        for imported in sorted(graph[name]):
            walk(imported, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        walk(name, [])
    # then
    assert cycles == []
