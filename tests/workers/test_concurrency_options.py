"""`@tool(concurrency=..., concurrency_key=...)`: checked when declared, and carried by the catalog to
orchestrators that do not have the tool's code."""

from __future__ import annotations

from typing import Any

import pytest

from tests.workers.tool_classes import definition_of
from workers import ToolDefinitionError, tool
from workers.runtime.catalog import CatalogTool


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "@tool(concurrency=...) must be a whole number of calls, 1 or more, got 0"),
        ({"concurrency": 2.5}, "@tool(concurrency=...) must be a whole number of calls, 1 or more, got 2.5"),
        (
            {"concurrency": True},
            "@tool(concurrency=...) must be a whole number of calls, 1 or more, got True",
        ),
        (
            {"concurrency": 2, "concurrency_key": " "},
            "@tool(concurrency_key=...) must name a parameter or argument, got ' '",
        ),
        (
            {"concurrency_key": "tenant"},
            "@tool(concurrency_key=...) needs concurrency=N: how many calls per value",
        ),
    ],
)
def test_a_limit_that_cannot_be_kept_is_refused_when_declared(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        tool("Renders", **options)
    assert str(raised.value) == message


def test_the_catalog_carries_the_limit_to_other_orchestrators() -> None:
    # given: a tool limited per account, as a worker publishes it
    @tool("Posts to the ledger", pool="io", concurrency=2, concurrency_key="account")
    def post(account: str, amount: float) -> str:
        return "posted"

    published = CatalogTool.of(definition_of(post, "post")).to_json()

    # when: an orchestrator reads it back
    read = CatalogTool.from_json(published).definition()

    # then: it knows the limit and its key
    assert (read.options.concurrency, read.options.concurrency_key) == (2, "account")
