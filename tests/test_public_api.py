"""The public face of `workers`: its exact `__all__`, the DESIGN.md contract, and its import isolation."""

import subprocess
import sys
from pathlib import Path

import pytest

import workers

WORKERS_ALL = [
    "Image",
    "ImageContent",
    "InvocationContext",
    "InvocationParameters",
    "OutcomeKind",
    "Param",
    "ReturnBehavior",
    "SearchBehavior",
    "TextContent",
    "ToolArgumentsError",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolErrorVisibleToLlm",
    "ToolExecution",
    "ToolExecutionRequest",
    "ToolExecutionResult",
    "ToolMemoryId",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResultError",
    "ToolSpecification",
    "ToolfleetError",
    "compensate_for",
    "tool",
    "tool_specifications_from",
]

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


def test_all_is_exactly_the_known_sorted_list() -> None:
    assert workers.__all__ == WORKERS_ALL
    assert sorted(workers.__all__) == workers.__all__


def test_every_name_in_all_is_defined() -> None:
    missing = [name for name in workers.__all__ if not hasattr(workers, name)]

    assert missing == []


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
