"""The README's configuration table names every `TOOLFLEET_*` setting, with its default."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from orchestrator.server.settings import SERVE_ENVIRONMENT, ServeSettings
from orchestrator.server.ui import UI_ENVIRONMENT, UiSettings
from workers.settings import ENVIRONMENT, Settings

README = Path(__file__).resolve().parents[1] / "README.md"

# Defaults that are not a literal value, and how the table says them.
DESCRIBED = {
    "broker_url": "the Redis URL",
    "result_backend": "the Redis URL",
    "visibility_timeout_s": "derived",
}


def _table() -> dict[str, str]:
    """Variable -> its default cell, from the rows of the table under `## Configuration`."""
    section = README.read_text().split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`TOOLFLEET_"):
            continue
        names = re.findall(r"`(TOOLFLEET_[A-Z0-9_]+)`", cells[0])
        defaults = [d.strip() for d in cells[1].split(",")] if len(names) > 1 else [cells[1]]
        assert len(defaults) == len(names), f"one default per variable in: {line}"
        assert cells[2], f"no meaning given in: {line}"
        rows.update(zip(names, defaults, strict=True))
    return rows


def _written(value: object) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value == "" or value is None:  # unset: no value at all
        return "—"
    return f"`{value}`"


def test_every_setting_is_in_the_readme_table_with_its_default() -> None:
    table = _table()
    variables = {*ENVIRONMENT.values(), *SERVE_ENVIRONMENT.values(), *UI_ENVIRONMENT.values()}
    assert set(table) == variables
    for item in fields(Settings):
        expected = DESCRIBED.get(item.name) or _written(item.default)
        assert table[ENVIRONMENT[item.name]] == expected, item.name
    for item in fields(ServeSettings):
        if item.name in SERVE_ENVIRONMENT:
            expected = "—" if item.name in ("agents", "api_keys") else _written(item.default)
            assert table[SERVE_ENVIRONMENT[item.name]] == expected, item.name
    for item in fields(UiSettings):
        if item.name in UI_ENVIRONMENT:
            assert table[UI_ENVIRONMENT[item.name]] == _written(item.default), item.name
