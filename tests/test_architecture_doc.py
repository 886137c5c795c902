"""docs/ARCHITECTURE.md names real modules: every `path/like/this.py`, folder `path/` and dotted module
(`workers.app`) it mentions exists in the tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"

_PATH = re.compile(r"(?<![\w./-])((?:workers|orchestrator)/[\w./-]*[\w/])")
_DOTTED = re.compile(r"(?<![\w./-])((?:workers|orchestrator)(?:\.\w+)+)")


def named_paths(text: str) -> list[str]:
    """The file and folder paths and the dotted modules of the two packages that `text` names."""
    return sorted(set(_PATH.findall(text)) | set(_DOTTED.findall(text)))


def missing(names: list[str], root: Path) -> list[str]:
    """The names with no file, folder or module behind them below `root`."""
    absent = []
    for name in names:
        if "/" in name:
            found = (root / name).exists()
        else:
            base = root.joinpath(*name.split("."))
            found = base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
        if not found:
            absent.append(name)
    return absent


def test_every_module_the_architecture_names_exists() -> None:
    names = named_paths(DOC.read_text(encoding="utf-8"))
    assert len(names) > 30, f"the walk found the doc's paths: {names}"
    assert not missing(names, ROOT), f"{DOC.relative_to(ROOT)} names what is not there"


def test_the_readme_links_the_architecture() -> None:
    assert "(docs/ARCHITECTURE.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("text", "names", "absent"),
    [
        ("see `workers/app.py`.", ["workers/app.py"], []),
        (
            "in `workers/gone.py` and `orchestrator/loop/`",
            ["orchestrator/loop/", "workers/gone.py"],
            ["workers/gone.py"],
        ),
        (
            "`celery -A workers.app`, `orchestrator.nothing`",
            ["orchestrator.nothing", "workers.app"],
            ["orchestrator.nothing"],
        ),
        ("the workers and the orchestrator.", [], []),
    ],
)
def test_the_check_finds_paths_and_modules_and_reports_the_missing(
    text: str, names: list[str], absent: list[str]
) -> None:
    assert named_paths(text) == names
    assert missing(names, ROOT) == absent
