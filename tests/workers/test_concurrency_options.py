"""`@tool(concurrency=..., concurrency_key=..., rate_limit=..., rate_limit_key=...)`: checked when
declared, and carried by the catalog to orchestrators that do not have the tool's code."""

from __future__ import annotations

from typing import Any

import pytest

from tests.workers.tool_classes import definition_of
from workers import ToolDefinitionError, tool
from workers.runtime.catalog import CatalogTool
from workers.tools.rate_limits import parse_rate_limit


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
        (
            {"rate_limit": "fast"},
            "@tool(rate_limit=...): a rate limit is a number of starts per period, like '10/s', '100/m', "
            "'5/10s', got 'fast'",
        ),
        (
            {"rate_limit": "0/s"},
            "@tool(rate_limit=...): a rate limit is a number of starts per period, like '10/s', '100/m', "
            "'5/10s', got '0/s'",
        ),
        (
            {"rate_limit": "5/0s"},
            "@tool(rate_limit=...): a rate limit is a number of starts per period, like '10/s', '100/m', "
            "'5/10s', got '5/0s'",
        ),
        (
            {"rate_limit": 10},
            "@tool(rate_limit=...): a rate limit is a number of starts per period, like '10/s', '100/m', "
            "'5/10s', got 10",
        ),
        (
            {"rate_limit": "10/s", "rate_limit_key": ""},
            "@tool(rate_limit_key=...) must name a parameter or argument, got ''",
        ),
        (
            {"rate_limit_key": "tenant"},
            "@tool(rate_limit_key=...) needs rate_limit='N/s': how many starts per value",
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


@pytest.mark.parametrize(
    ("text", "limit", "period_ms", "shown"),
    [
        ("20/s", 20, 1_000, "20/s"),
        ("100/m", 100, 60_000, "100/m"),
        (" 5 / 10s ", 5, 10_000, "5/10s"),
        ("1000/h", 1000, 3_600_000, "1000/h"),
        ("3/d", 3, 86_400_000, "3/d"),
    ],
)
def test_a_rate_limit_reads_as_starts_per_period(text: str, limit: int, period_ms: int, shown: str) -> None:
    rate = parse_rate_limit(text)
    assert (rate.limit, rate.period_ms, str(rate)) == (limit, period_ms, shown)


def test_the_catalog_carries_the_rate_limit_to_other_orchestrators() -> None:
    # given: a tool rate-limited per account, as a worker publishes it
    @tool("Geocodes", pool="io", rate_limit="20/s", rate_limit_key="account")
    def geocode(account: str, address: str) -> str:
        return "here"

    published = CatalogTool.of(definition_of(geocode, "geocode")).to_json()

    # when: an orchestrator reads it back
    read = CatalogTool.from_json(published).definition()

    # then: it knows the rate and its key
    assert (read.options.rate_limit, read.options.rate_limit_key) == ("20/s", "account")
