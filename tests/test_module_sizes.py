"""Files stay small enough to read in one sitting: a product module of `workers` or `orchestrator` is
split when it passes ~400 lines, a test file when it passes ~600 (house style)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULE_LIMIT = 400
TEST_FILE_LIMIT = 600


def oversized(paths: Iterable[Path], limit: int, root: Path) -> list[str]:
    """`path: N lines` for every file longer than `limit`, longest first."""
    sizes = [(len(path.read_text(encoding="utf-8").splitlines()), path) for path in paths]
    return [
        f"{path.relative_to(root)}: {lines} lines"
        for lines, path in sorted(sizes, reverse=True)
        if lines > limit
    ]


def test_no_product_module_passes_400_lines() -> None:
    modules = [path for package in ("workers", "orchestrator") for path in (ROOT / package).rglob("*.py")]
    assert len(modules) > 20, "the walk found the packages"
    too_long = oversized(modules, MODULE_LIMIT, ROOT)
    assert not too_long, f"split these modules (limit ~{MODULE_LIMIT} lines):\n" + "\n".join(too_long)


def test_no_test_file_passes_600_lines() -> None:
    test_files = list((ROOT / "tests").rglob("test_*.py"))
    assert len(test_files) > 20, "the walk found the tests"
    too_long = oversized(test_files, TEST_FILE_LIMIT, ROOT)
    assert not too_long, f"split these test files by subject (limit ~{TEST_FILE_LIMIT} lines):\n" + "\n".join(
        too_long
    )


@pytest.mark.parametrize(("lines", "reported"), [(10, False), (100, False), (101, True)])
def test_a_file_is_reported_only_past_the_limit(tmp_path: Path, lines: int, reported: bool) -> None:
    path = tmp_path / "m.py"
    path.write_text("x = 1\n" * lines, encoding="utf-8")
    assert oversized([path], 100, tmp_path) == ([f"m.py: {lines} lines"] if reported else [])
