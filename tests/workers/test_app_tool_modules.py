"""`celery -A workers.app` loads its tools as `toolfleet worker` does: each module imported once,
and every compensation checked before a tool is served."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._cli import environment
from workers.app import make_app, registry_from_modules
from workers.errors import ToolDefinitionError, ToolModuleError
from workers.settings import Settings

MISNAMED = textwrap.dedent(
    """
    from workers import compensate_for, tool


    @tool(pool="misnamed")
    def credit(name: str) -> str:
        return name


    @compensate_for("credti")
    def uncredit(name: str) -> None: ...
    """
)
CELERY = str(Path(sys.executable).parent / "celery")


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "misnamed_tools.py").write_text(MISNAMED)
    (tmp_path / "counted_tools.py").write_text(
        "import builtins\nbuiltins.counted_imports = getattr(builtins, 'counted_imports', 0) + 1\n"
        "from workers import tool\n\n\n@tool(pool='counted')\ndef ping() -> str:\n    return 'pong'\n"
    )
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in ("misnamed_tools", "counted_tools"):
        sys.modules.pop(name, None)


def test_the_app_of_a_module_with_a_misnamed_compensation_is_refused(module_dir: Path) -> None:
    # when the worker app is built from a module whose compensation names no tool
    with pytest.raises(ToolDefinitionError) as caught:
        make_app(Settings(), registry_from_modules(["misnamed_tools"]))
    # then it is refused, naming the compensation
    assert '@compensate_for("credti")' in str(caught.value)
    assert "no tool named 'credti'" in str(caught.value)


def test_celery_a_workers_app_refuses_a_misnamed_compensation(module_dir: Path) -> None:
    # when `celery -A workers.app` starts a worker serving that module (its broker never answers, so
    # a worker that started would retry it until stopped)
    command = [CELERY, "-A", "workers.app", "worker", "--pool", "solo", "-Q", "misnamed"]
    variables = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(module_dir), os.environ.get("PYTHONPATH")])),
        "TOOLFLEET_TOOLS": "misnamed_tools",
        "TOOLFLEET_REDIS_URL": "redis://127.0.0.1:1/0",
    }
    try:
        result = subprocess.run(
            command, cwd=module_dir, env=environment(variables), capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the worker started instead of refusing its tools: {(exc.stderr or b'')[-500:]!r}")
    # then it does not start, and says why
    assert result.returncode != 0
    assert "no tool named 'credti'" in result.stderr + result.stdout


def test_a_module_is_imported_once_and_a_missing_attribute_is_a_module_error(module_dir: Path) -> None:
    import builtins

    registry = registry_from_modules([" counted_tools ", ""])
    assert [d.name for d in registry] == ["ping"]
    assert getattr(builtins, "counted_imports", 0) == 1
    with pytest.raises(ToolModuleError, match="module counted_tools has no attribute 'Missing'"):
        registry_from_modules(["counted_tools:Missing"])
