"""The configuration reference (docs/configuration.md, generated from the code when the site is built)
names every `TOOLFLEET_*` setting the code reads, with its default and a meaning."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from orchestrator.cli.reference import configuration_reference, settings
from orchestrator.server.settings import SERVE_DESCRIPTIONS, SERVE_ENVIRONMENT, ServeSettings
from orchestrator.server.ui import UI_ENVIRONMENT, UiSettings
from orchestrator.server.ui.settings import UI_DESCRIPTIONS
from workers.errors import SettingsError
from workers.settings import _LOWER_BOUNDS, DESCRIPTIONS, ENVIRONMENT, Settings

ROOT = Path(__file__).resolve().parents[1]

# Defaults that are not a literal value, and how the table says them.
DESCRIBED = {
    "broker_url": "the Redis URL",
    "result_backend": "the Redis URL",
    "visibility_timeout_s": "derived",
}
# `TOOLFLEET_*` names in the product's code that are not settings a user sets.
NOT_SETTINGS = {
    "TOOLFLEET_WORKER_LOST": "a state the result collector gives a call, never read from the environment",
    "TOOLFLEET_NO_WORKER": "a state the result collector gives a call, never read from the environment",
    "TOOLFLEET_EXAMPLES_SLOW": "the example tools' delays, set by `toolfleet demo` for its own workers",
    "TOOLFLEET_DEVREDIS": "what `python -m workers._devredis` tells the command it runs, set by it",
}


def _table() -> dict[str, str]:
    """Variable -> its default cell, from the rows of the generated tables."""
    rows: dict[str, str] = {}
    for line in configuration_reference().splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) != 3 or not cells[0].startswith("`TOOLFLEET_"):
            continue
        names = re.findall(r"`(TOOLFLEET_[A-Z0-9_]+)`", cells[0])
        assert len(names) == 1, f"one variable a row: {line}"
        assert cells[2], f"no meaning given in: {line}"
        assert names[0] not in rows, f"{names[0]} is in the reference twice"
        rows[names[0]] = cells[1]
    return rows


def _written(value: object) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value == "" or value is None:  # unset: no value at all
        return "—"
    return f"`{value}`"


def test_every_setting_is_in_the_configuration_reference_with_its_default() -> None:
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
    assert table[SERVE_ENVIRONMENT["api_keys_file"]] == "—"
    for item in fields(UiSettings):
        if item.name in UI_ENVIRONMENT:
            assert table[UI_ENVIRONMENT[item.name]] == _written(item.default), item.name


@pytest.mark.parametrize(
    ("environment", "descriptions"),
    [(ENVIRONMENT, DESCRIPTIONS), (SERVE_ENVIRONMENT, SERVE_DESCRIPTIONS), (UI_ENVIRONMENT, UI_DESCRIPTIONS)],
)
def test_every_setting_is_declared_with_a_description(
    environment: dict[str, str], descriptions: dict[str, str]
) -> None:
    assert set(descriptions) == set(environment)
    assert all(text.strip() for text in descriptions.values())


def test_a_setting_declared_without_a_description_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: a setting whose description was never written
    monkeypatch.delitem(DESCRIPTIONS, "max_fanout")

    # when / then: the reference (and so the site's build) refuses it, naming the variable
    with pytest.raises(ValueError, match=r"TOOLFLEET_MAX_FANOUT .*has no description"):
        settings()


def test_every_variable_the_code_names_is_a_setting_of_the_reference() -> None:
    # given: every TOOLFLEET_* name spelled out in the product's code
    named = {
        name
        for package in ("workers", "orchestrator")
        for path in (ROOT / package).rglob("*.py")
        for name in re.findall(r"\bTOOLFLEET_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8"))
    }
    assert "TOOLFLEET_API_KEYS_FILE" in named, "the walk read the packages"
    # then: each is in the reference, or is not a setting at all
    assert named - set(_table()) - set(NOT_SETTINGS) == set()


@pytest.mark.parametrize("name", sorted(DESCRIPTIONS))
def test_the_range_a_description_gives_is_the_one_the_settings_enforce(name: str) -> None:
    # the range as written, in brackets: "(>= 1)", "(> 0, below the heartbeat TTL)"
    written = re.findall(r"\((>=?) ([0-9.]+)[,)]", DESCRIPTIONS[name])
    if name not in _LOWER_BOUNDS:
        assert written == [], f"{name} has no range, its description gives one"
        return
    minimum, inclusive = _LOWER_BOUNDS[name]
    assert written == [(">=" if inclusive else ">", f"{minimum:g}")], DESCRIPTIONS[name]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_body_bytes", 1),
        ("max_messages", 1),
        ("max_invocations", 1),
        ("history_messages", 1),
        ("drain_grace_s", 0),
        ("turn_wait_s", 0),
    ],
)
def test_the_range_of_a_service_setting_is_the_one_it_enforces(name: str, value: int) -> None:
    # given: the bound the description gives, "(>= N)"
    assert f"(>= {value})" in SERVE_DESCRIPTIONS[name]
    environment = {SERVE_ENVIRONMENT["agents"]: "bank=myapp.agents:bank"}
    # then: the bound itself is accepted, one below it refused
    ServeSettings.from_env(environ={**environment, SERVE_ENVIRONMENT[name]: str(value)})
    with pytest.raises(SettingsError, match=SERVE_ENVIRONMENT[name]):
        ServeSettings.from_env(environ={**environment, SERVE_ENVIRONMENT[name]: str(value - 1)})
