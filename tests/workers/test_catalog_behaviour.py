"""What a worker's catalog entry says of each tool's behaviour (approval, heartbeat, idempotence, its
compensation by name), read back whole; and an entry of an earlier toolfleet, which leaves some of it
out, read with those facts unknown rather than guessed or refused."""

from __future__ import annotations

import json

import pytest

from tests.integration import behaviour_tools
from workers.app import registry_from_modules
from workers.runtime.catalog import CatalogTool, WorkerEntry
from workers.tools import ToolDefinition

FACTS = ("requires_approval", "heartbeat_timeout_s", "idempotent", "compensable", "compensation")


def _definitions() -> dict[str, ToolDefinition]:
    return {d.name: d for d in registry_from_modules([behaviour_tools.__name__])}


def _published(name: str) -> dict[str, object]:
    """The tool as a worker of this release publishes it, through JSON as Redis keeps it."""
    loaded: dict[str, object] = json.loads(
        json.dumps(CatalogTool.of(_definitions()[name], "rel-7").to_json())
    )
    return loaded


def test_an_entry_says_how_each_tool_behaves() -> None:
    # when
    published = {name: _published(name) for name in ("wire", "watch", "hold_seat")}
    # then
    assert {name: tuple(entry[fact] for fact in FACTS) for name, entry in published.items()} == {
        "wire": (True, None, False, True, "Payments.wire_back"),
        "watch": (False, 5, True, False, None),
        "hold_seat": (False, None, False, True, "release_seat"),
    }


@pytest.mark.parametrize("name", ["wire", "watch", "hold_seat"])
def test_an_entry_reads_back_as_it_was_published(name: str) -> None:
    # given
    advertised = CatalogTool.of(_definitions()[name], "rel-7")
    # when
    read = CatalogTool.from_json(_published(name))
    # then
    assert (read.specification, read.version, read.compensable, read.compensation) == (
        advertised.specification,
        advertised.version,
        advertised.compensable,
        advertised.compensation,
    )
    assert read.unknown == frozenset()
    assert (read.options.requires_approval, read.options.heartbeat_timeout_s, read.options.idempotent) == (
        advertised.options.requires_approval,
        advertised.options.heartbeat_timeout_s,
        advertised.options.idempotent,
    )


@pytest.mark.parametrize(
    ("name", "dropped", "unknown"),
    [
        # the previous release: no compensation's name, for a tool that has one...
        ("wire", ("compensation",), {"compensation"}),
        # ...and nothing to know for a tool that has none
        ("watch", ("compensation",), set()),
        # before approvals and heartbeats
        (
            "wire",
            ("compensation", "requires_approval", "heartbeat_timeout_s"),
            set(FACTS) - {"idempotent", "compensable"},
        ),
        # an entry with no word of behaviour at all
        ("hold_seat", FACTS, set(FACTS)),
    ],
)
def test_what_an_earlier_worker_left_out_is_unknown(
    name: str, dropped: tuple[str, ...], unknown: set[str]
) -> None:
    # given
    entry = {key: value for key, value in _published(name).items() if key not in dropped}
    # when
    read = CatalogTool.from_json(entry)
    # then: read, the missing facts named, and no compensation's name made up
    assert read.unknown == frozenset(unknown)
    assert read.specification.name == name
    if "compensation" in unknown or "compensable" in unknown:
        assert read.compensation is None


def test_a_worker_entry_of_an_earlier_release_reads_with_its_tools() -> None:
    # given: a whole worker entry whose tools name no compensation
    tools = [{k: v for k, v in _published(name).items() if k != "compensation"} for name in ("wire", "watch")]
    entry = {
        "hostname": "old@h",
        "pools": ["behave"],
        "pool_kind": "threads",
        "concurrency": 2,
        "tools": tools,
    }
    # when
    read = WorkerEntry.from_json(json.loads(json.dumps(entry)))
    # then
    assert [(t.specification.name, t.compensable, t.compensation, sorted(t.unknown)) for t in read.tools] == [
        ("wire", True, None, ["compensation"]),
        ("watch", False, None, []),
    ]
