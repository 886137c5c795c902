"""A rolling deploy on real worker processes: two workers of pool `versioned` serve different versions of
tool `vt_lookup` (the new one with a parameter more, a longer timeout and a build id). Each call reaches
a worker of the version its definition has, both builds serve side by side, a version no live worker
has is answered `no_worker` naming those present, and `toolfleet tools` shows both versions."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.integration.versioned_tools_v1 as v1
import tests.integration.versioned_tools_v2 as v2
from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.executors.celery import CeleryExecutor
from tests.integration.worker_processes import REPO_ROOT, all_running, celery_executor, tool_worker
from workers import OutcomeKind, ToolOutcome
from workers.calls.invocation import Invocation
from workers.settings import Settings
from workers.tools import ToolDefinition
from workers.tools.registry import ToolRegistry

pytestmark = [pytest.mark.integration, pytest.mark.broker]

V1_HOST = "vt-v1@integration"
V2_HOST = "vt-v2@integration"
BUILD = "rel-2"
CALLS = 8  # per version: all of them on the right worker is no accident (2 ** -8 each by chance)


def _definition(module: object) -> ToolDefinition:
    found = ToolRegistry([module]).get("vt_lookup")
    assert found is not None
    return found


V1_VERSION = _definition(v1).digest
V2_VERSION = f"{_definition(v2).digest}+{BUILD}"


@pytest.fixture
def builds(redis_url: str, worker_logs: Path) -> Iterator[None]:
    """The old build (v1, no build id) and, started after it, the new one (v2, build `rel-2`)."""
    starts = {
        "v1": lambda: tool_worker(
            redis_url, [v1.POOL], ["tests.integration.versioned_tools_v1"], worker_logs / "vt-v1.log", V1_HOST
        ),
        "v2": lambda: tool_worker(
            redis_url,
            [v2.POOL],
            ["tests.integration.versioned_tools_v2"],
            worker_logs / "vt-v2.log",
            V2_HOST,
            extra_args=("--build-id", BUILD),
        ),
    }
    with all_running({"v1": starts["v1"]}), all_running({"v2": starts["v2"]}):
        yield


def _calls(executor: CeleryExecutor, definition: ToolDefinition, n: int, prefix: str) -> list[ToolOutcome]:
    async def run() -> list[ToolOutcome]:
        invocation = Invocation()
        return list(
            await asyncio.gather(
                *(
                    executor.execute(
                        ToolExecutionRequest(f"{prefix}{i}", "vt_lookup", f'{{"key": "k{i}"}}'),
                        definition,
                        invocation,
                    )
                    for i in range(n)
                )
            )
        )

    return asyncio.run(run())


def test_each_call_reaches_a_worker_of_its_version_while_both_builds_serve(
    settings: Settings, builds: None
) -> None:
    with celery_executor(settings) as executor:
        # When: calls of both versions are made at once, from the tools' own code
        old = _calls(executor, _definition(v1), CALLS, "a")
        new = _calls(executor, _definition(v2), CALLS, "b")

        # Then: every call of each version ran on the worker serving that version, and succeeded
        assert {(o.kind, o.worker) for o in old} == {(OutcomeKind.SUCCESS, V1_HOST)}, [o.text for o in old]
        assert {(o.kind, o.worker) for o in new} == {(OutcomeKind.SUCCESS, V2_HOST)}, [o.text for o in new]
        assert sorted(o.text for o in old) == sorted(f"v1:k{i}" for i in range(CALLS))
        assert sorted(o.text for o in new) == sorted(f"v2:main:k{i}" for i in range(CALLS))

        # And: an orchestrator with no tool code gives the model the newest worker's definition, whose
        # calls reach that build
        (listed,) = [d for d in executor.catalog_definitions() if d.name == "vt_lookup"]
        assert (listed.version, listed.timeout) == (_definition(v2).digest, 20)
        assert set(listed.specification.parameters["properties"]) == {"key", "namespace"}  # type: ignore[index]
        assert {o.worker for o in _calls(executor, listed, 4, "c")} == {V2_HOST}
        found = executor.definition("vt_lookup")  # a call made by name alone: the same definition
        assert found is not None and (found.version, found.timeout) == (listed.version, 20)

        # And: through the loop, the model's call of the old definition is served by the old build
        call = ToolExecutionRequest("m1", "vt_lookup", '{"key": "z"}')
        model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "done"])
        result = AiService(chat_model=model, tools=[v1], executor=executor).chat("look z up")
        (execution,) = result.tool_executions
        assert (execution.result, execution.worker, execution.has_failed) == ("v1:z", V1_HOST, False)


def test_a_version_no_live_worker_serves_is_no_worker_naming_the_versions_present(
    settings: Settings, builds: None
) -> None:
    # Given: a definition of a third version (its timeout changed), and one pinned to a build not running
    third = dataclasses.replace(
        _definition(v1), options=dataclasses.replace(_definition(v1).options, timeout=30)
    )
    pinned = dataclasses.replace(_definition(v2), version=f"{_definition(v2).digest}+rel-1")
    present = ", ".join(f"{v} (1 worker)" for v in sorted([V1_VERSION, V2_VERSION]))
    with celery_executor(settings) as executor:
        # When: each is called
        started = time.monotonic()
        (outcome,) = _calls(executor, third, 1, "x")
        (pinned_outcome,) = _calls(executor, pinned, 1, "y")
        elapsed = time.monotonic() - started
        # And: a definition pinned to the running build
        (served,) = _calls(executor, dataclasses.replace(_definition(v2), version=V2_VERSION), 1, "z")

    # Then: answered at once, naming the versions the pool's live workers serve
    assert (outcome.kind, outcome.error_type) == (OutcomeKind.NO_WORKER, "NoWorkerError")
    assert outcome.text == (
        f"No live worker of pool '{v1.POOL}' serves tool 'vt_lookup' at version {third.digest}; "
        f"its live workers serve versions {present}"
    )
    assert pinned_outcome.text == (
        f"No live worker of pool '{v1.POOL}' serves tool 'vt_lookup' at version "
        f"{_definition(v2).digest}+rel-1; its live workers serve versions {present}"
    )
    assert elapsed < 2.0
    assert (served.kind, served.worker) == (OutcomeKind.SUCCESS, V2_HOST)


def _toolfleet_tools(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "tools", "--pool", v1.POOL, *args],
        env={**os.environ, "TOOLFLEET_REDIS_URL": redis_url, "PYTHONPATH": REPO_ROOT},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_toolfleet_tools_shows_both_versions_and_the_rolling_pool(redis_url: str, builds: None) -> None:
    # When: the catalog is listed, as text and as JSON
    text = _toolfleet_tools(redis_url)
    listed = _toolfleet_tools(redis_url, "--json")

    # Then: one row per version, the newest first, each served by one of the pool's two workers
    assert text.returncode == 0, text.stderr
    rows = [line.split() for line in text.stdout.splitlines() if line.startswith("  vt_lookup")]
    assert [row[:12] for row in rows] == [  # ... approval, heartbeat, idempotent, compensation, workers
        ["vt_lookup", v1.POOL, "20", "s", "no", "-", "no", "-", "1", "of", "2", V2_VERSION],
        ["vt_lookup", v1.POOL, "10", "s", "no", "-", "no", "-", "1", "of", "2", V1_VERSION],
    ]
    assert (
        "Rolling pools (1): their workers serve different versions of some tools; each call goes to a "
        "worker of the version its model was given (newest first).\n"
        f"  pool '{v1.POOL}':\n"
        f"    vt_lookup {V2_VERSION}: '{V2_HOST}'\n"
        f"    vt_lookup {V1_VERSION}: '{V1_HOST}'\n"
    ) in text.stdout
    assert "Mixed pools" not in text.stdout
    workers = {line.split()[0]: line.split() for line in text.stdout.splitlines() if "@integration" in line}
    assert workers[V2_HOST][-1] == BUILD and workers[V1_HOST][-1] == "-"
    assert workers[V2_HOST][1] == workers[V1_HOST][1] == v1.POOL  # a build's queue is no pool of its own

    catalog = json.loads(listed.stdout)
    (tool,) = catalog["tools"]
    assert (tool["version"], tool["timeout"], tool["workers"]) == (V2_VERSION, 20, [V1_HOST, V2_HOST])
    assert tool["versions"] == [
        {"version": V2_VERSION, "workers": [V2_HOST]},
        {"version": V1_VERSION, "workers": [V1_HOST]},
    ]
    builds_of = {w["hostname"]: (w["build_id"], w["versions"]) for w in catalog["workers"]}
    assert builds_of == {
        V1_HOST: (None, {"vt_lookup": V1_VERSION}),
        V2_HOST: (BUILD, {"vt_lookup": V2_VERSION}),
    }
    assert catalog["mixed_pools"] == []
    assert [w["pools"] for w in catalog["workers"]] == [[v1.POOL], [v1.POOL]]
