"""Every product module logs under its own dotted name, `logging.getLogger(__name__)` (house style), so
a log line names the module that wrote it and logging can be tuned per package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fixed_logger_names(paths: list[Path], root: Path) -> list[str]:
    """`path:line` for every module-level `log = logging.getLogger(<anything but __name__>)`."""
    found = []
    for path in paths:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            function = node.value.func
            if not (isinstance(function, ast.Attribute) and function.attr == "getLogger"):
                continue
            arguments = node.value.args
            if not (
                len(arguments) == 1 and isinstance(arguments[0], ast.Name) and arguments[0].id == "__name__"
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_every_product_module_logs_under_its_own_name() -> None:
    paths = [
        path for package in ("workers", "orchestrator") for path in sorted((ROOT / package).rglob("*.py"))
    ]
    assert len(paths) > 20, "the walk found the packages"
    found = fixed_logger_names(paths, ROOT)
    assert not found, "use logging.getLogger(__name__) in:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "reported"),
    [
        ('import logging\nlog = logging.getLogger("workers.tasks")\n', True),
        ("import logging\nlog = logging.getLogger()\n", True),
        ("import logging\nlog = logging.getLogger(__name__)\n", False),
        ("import logging\n\ndef f():\n    logging.getLogger('celery').setLevel(10)\n", False),
    ],
)
def test_the_walk_reports_fixed_logger_names(tmp_path: Path, source: str, reported: bool) -> None:
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    assert fixed_logger_names([path], tmp_path) == (["m.py:2"] if reported else [])
