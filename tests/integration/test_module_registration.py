"""A module of tools served whole by a real worker: its module-level compensation and its tool class
are served, the catalog and the saga see them, and what cannot be served is said, not skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import tests.integration.registration_tools as reg
from orchestrator import AiMessage, AiService, ScriptedChatModel
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.saga.journal import Journal
from tests.integration.scripts import call
from tests.integration.worker_processes import REPO_ROOT, tool_worker
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

MODULE = "tests.integration.registration_tools"
HOSTNAME = "regmod@integration"


@pytest.fixture(scope="module")
def reg_worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    worker = tool_worker(redis_url, [reg.POOL], [MODULE], worker_logs / "regmod.log", HOSTNAME)
    with worker.running(timeout_s=60):
        yield worker


def test_the_catalog_shows_the_module_level_compensation_and_the_tool_class(
    redis_url: str, reg_worker: WorkerProcess
) -> None:
    # When: an operator lists the pool
    listed = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "tools", "--pool", reg.POOL, "--json"],
        env={**os.environ, "TOOLFLEET_REDIS_URL": redis_url, "PYTHONPATH": REPO_ROOT},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    # Then: the credit is compensable, and the class's tool is served next to the functions
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t["compensable"] for t in json.loads(listed.stdout)["tools"]}
    assert tools == {"reg_credit": True, "reg_pay": False, "reg_note": False}


def test_the_worker_log_names_the_tool_class_it_left_out_and_how_to_serve_it(
    reg_worker: WorkerProcess,
) -> None:
    assert reg_worker.log_path is not None
    log = reg_worker.log_path.read_text(errors="replace")

    assert (
        "WARNING workers.tools._modules: "
        f"Module '{MODULE}' serves no tool of its tool classes whose constructors "
        "need arguments: RegVault (tools reg_open_vault; RegVault.__init__() missing 1 required positional "
        "argument: 'secret'). To serve one, make an instance in the module (`reg_vault = RegVault(...)`): "
        f"the module's tool objects are served, or name that instance alone: --tools {MODULE}:reg_vault"
    ) in log


def test_a_saga_on_the_worker_runs_the_module_level_compensation(
    redis_url: str, settings: Settings, reg_worker: WorkerProcess, tmp_path: Path
) -> None:
    # Given: the pool's tools as the catalog advertises them; a credit and a note, then a declined payment
    ns = uuid.uuid4().hex
    executor = CeleryExecutor(settings=settings)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}")
    model = ScriptedChatModel(
        [
            AiMessage(
                tool_execution_requests=[
                    call("1", "reg_credit", ns=ns, name="Ada", amount=100),
                    call("2", "reg_note", ns=ns, text="hi"),
                ]
            ),
            AiMessage(tool_execution_requests=[call("3", "reg_pay", ns=ns, name="Ada")]),
            "The payment was declined",
        ]
    )
    try:
        service = AiService(
            chat_model=model,
            tools=[d for d in executor.catalog_definitions() if d.pool == reg.POOL],
            executor=executor,
            compensate_on_tool_errors=True,
            journal=journal,
        )

        # When
        result = service.chat("Credit Ada, note it, then pay")
        ledger = client.lrange(reg.ledger_key(ns), 0, -1)
    finally:
        executor.close()
        journal.engine.dispose()
        client.delete(reg.ledger_key(ns))
        client.close()

    # Then: the worker ran the module-level compensation of the credit, and the model was told
    assert sorted(ledger[:2]) == ["credit Ada 100", "note hi"]
    assert ledger[2:] == ["uncredit Ada 100"]
    assert result.tool_executions[0].result == (
        "Tool 'reg_credit' was executed successfully but was rolled back due to failure of tool 'reg_pay'"
    )
    assert result.tool_executions[0].worker == HOSTNAME


def test_a_module_with_only_classes_that_need_arguments_is_refused_saying_how_to_serve_them(
    redis_url: str, worker_logs: Path
) -> None:
    # Given: a module whose only tools belong to a class that needs constructor arguments
    module = "tests.integration.registration_vault_tools"
    log_path = worker_logs / f"regvault-{uuid.uuid4().hex[:6]}.log"
    worker = tool_worker(redis_url, ["regvault"], [module], log_path, "regvault@integration")

    # When
    try:
        code = worker.process.wait(timeout=40)
    finally:
        worker.stop()

    # Then: it exits 2 with what to do, not "does not have any functions annotated with @tool"
    assert worker.log_path is not None
    log = worker.log_path.read_text(errors="replace")
    assert code == 2, log
    assert (
        f"toolfleet worker: Module '{module}' has no @tool functions and serves no tool of its tool classes "
        "whose constructors need arguments: OnlyVault (tools only_open_vault; "
    ) in log
    assert f"--tools {module}:only_vault" in log
