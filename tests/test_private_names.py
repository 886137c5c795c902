"""An underscore name stays inside its module: a name another module of `workers` or `orchestrator`
imports is public in its (possibly private) module, as httpx's `_models.py` does (house style)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workers", "orchestrator")


def _dotted(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_imports(root: Path, packages: Iterable[str]) -> list[str]:
    """`path: from module import _name` for every underscore name imported from another module
    (a private submodule imported by name, `from pkg import _module`, is a module, not a name)."""
    files = [path for package in packages for path in sorted((root / package).rglob("*.py"))]
    modules = {_dotted(path, root) for path in files}
    found = []
    for path in files:
        here = _dotted(path, root).split(".")
        package = here if path.name == "__init__.py" else here[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and f"{source}.{alias.name}" not in modules:
                    found.append(f"{path.relative_to(root)}: from {source} import {alias.name}")
    return found


def test_no_product_module_imports_an_underscore_name_of_another() -> None:
    found = private_imports(ROOT, PACKAGES)
    assert len(list((ROOT / "orchestrator").rglob("*.py"))) > 20, "the walk found the packages"
    assert not found, "make these names public in their module:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "reported"),
    [
        ("from p.m import _hidden\n", ["p/a.py: from p.m import _hidden"]),
        ("from .m import _hidden, shown\n", ["p/a.py: from p.m import _hidden"]),
        ("from p.m import shown\n", []),
        ("from p import _private_module\n", []),
        ("from . import _private_module\n", []),
        ("from __future__ import annotations\n", []),
    ],
)
def test_the_walk_reports_underscore_names_and_not_private_modules(
    tmp_path: Path, source: str, reported: list[str]
) -> None:
    package = tmp_path / "p"
    package.mkdir()
    for name, text in {"__init__.py": "", "m.py": "", "_private_module.py": "", "a.py": source}.items():
        (package / name).write_text(text, encoding="utf-8")
    assert private_imports(tmp_path, ["p"]) == reported
