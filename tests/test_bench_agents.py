"""The agents the benchmark's replicas serve (bench/agents.py) need no pool but the one its worker
serves: a replica is ready (and measures 6, 7 and 12 run) only once every pool its agents' tools run
on has a live worker, and bench/tools.py also holds tools for other measures' workers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench import agents, tools
from orchestrator import AiService
from workers.tools import discover_tools


@pytest.mark.parametrize("build", [agents.plain, agents.journaled, agents.napping])
def test_the_served_agents_need_only_the_benchmark_workers_pool(
    build: Callable[[], AiService], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(agents.JOURNAL_URL_VARIABLE, "sqlite://")
    assert build().pools() == {agents.POOL}
    # while bench/tools.py holds tools of other pools too
    assert {definition.pool for definition in discover_tools(tools)} > {agents.POOL}
