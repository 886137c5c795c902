"""Fault injection: the broker unreachable from the start.

How these tests run: tests/integration/redis_faults/__init__.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from orchestrator import AiMessage, AiService, CeleryExecutor, ScriptedChatModel
from orchestrator.handlers import RemoteToolError
from orchestrator.messages import ToolExecutionResultMessage
from orchestrator.saga.journal import Journal
from tests._cli import toolfleet
from tests.integration import redis_fault_tools as rft
from tests.integration.private_redis import PrivateRedis, settings_for
from tests.integration.redis_faults._faults import RECOVERY_BOUND_S, count
from tests.integration.scripts import call
from tests.integration.worker_processes import REPO_ROOT
from workers import OutcomeKind, ToolOutcome
from workers.calls.invocation import Invocation

pytestmark = pytest.mark.integration


# -- 2. the broker unreachable from the start ------------------------------------------------------


def test_an_unreachable_broker_gives_a_clear_error_without_hanging(closed_url: str, ledger: Path) -> None:
    # Given: an executor whose broker, result backend and catalog are on a port nothing listens on
    executor = CeleryExecutor(settings=settings_for(closed_url), tools=[rft.tools])
    sleep = call("c1", "rf_sleep", ledger=str(ledger), key="k", seconds=0)

    # When: a call is executed
    started = time.monotonic()
    try:
        outcome = asyncio.run(executor.execute(sleep))
    finally:
        executor.close()
    elapsed = time.monotonic() - started

    # Then: it ends at once with an error naming the unreachable broker, and nothing ran
    print(f"\nunreachable broker: one call failed in {elapsed:.2f} s")
    assert elapsed < 10
    assert (outcome.kind, outcome.error_type) == (OutcomeKind.EXECUTION_ERROR, "BrokerUnavailable")
    assert outcome.text.startswith("Tool 'rf_sleep' could not be dispatched: the broker is unreachable")
    assert f":{closed_url.rsplit(':', 1)[1].split('/')[0]}" in outcome.text
    assert count(ledger, "run") == 0


def test_an_invocation_against_an_unreachable_broker_reports_it(closed_url: str, tmp_path: Path) -> None:
    # Given: AiService with that executor, compensation on and a journal
    executor = CeleryExecutor(settings=settings_for(closed_url), tools=[rft.tools])
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}")
    sleep = call("c1", "rf_sleep", ledger=str(tmp_path / "ledger"), key="k", seconds=0)
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[sleep]), "the tools are down"])
    strict_model = ScriptedChatModel([AiMessage(tool_execution_requests=[sleep]), "never sent"])

    def service(chat_model: ScriptedChatModel) -> AiService:
        return AiService(
            chat_model=chat_model,
            tools=[rft.tools],
            executor=executor,
            compensate_on_tool_errors=True,
            journal=journal,
        )

    # When: chat() runs it (execution errors go to the model), and achat() (they end the invocation)
    started = time.monotonic()
    try:
        result = service(model).chat("sleep")
        with pytest.raises(RemoteToolError) as raised:
            asyncio.run(service(strict_model).achat("sleep"))
    finally:
        executor.close()
    elapsed = time.monotonic() - started

    # Then: chat() tells the model the broker is unreachable, and the model answers
    assert elapsed < 20
    assert result.content == "the tools are down"
    sent = model.requests[1].messages[-1]
    assert isinstance(sent, ToolExecutionResultMessage) and sent.is_error
    assert "could not be dispatched: the broker is unreachable" in sent.text
    # ... achat() fails with that error
    assert "the broker is unreachable" in str(raised.value)
    # ... and the journal records the call as failed, with the reason
    [record] = journal.calls(result.invocation_id or "")
    assert (record.state, record.outcome) == ("failed", "execution_error")
    assert "the broker is unreachable" in (record.result or "")
    journal.engine.dispose()


def test_a_batch_against_an_unreachable_broker_fails_as_fast_as_one_call(
    closed_url: str, ledger: Path
) -> None:
    # Given: an executor whose broker is unreachable, and an event loop that must stay responsive
    executor = CeleryExecutor(settings=settings_for(closed_url), tools=[rft.tools])
    calls = [(call(f"c{i}", "rf_sleep", ledger=str(ledger), key=f"k{i}", seconds=0), None) for i in range(4)]
    ticks = 0

    async def run() -> list[ToolOutcome]:
        nonlocal ticks

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        try:
            return await executor.execute_batch(calls, Invocation())
        finally:
            ticker.cancel()

    # When: one response's 4 calls are executed
    started = time.monotonic()
    try:
        outcomes = asyncio.run(run())
    finally:
        executor.close()
    elapsed = time.monotonic() - started

    # Then: all fail together, as fast as one call: after the first refused publish the executor fails
    # the batch's other calls at once (the loop is blocked only during that first attempt)
    print(f"\nunreachable broker: a batch of 4 failed in {elapsed:.2f} s; the loop ticked {ticks} times")
    assert {o.error_type for o in outcomes} == {"BrokerUnavailable"}
    assert elapsed < 1.5


def test_the_tools_command_against_an_unreachable_redis_exits_2_at_once(closed_url: str) -> None:
    # Given: TOOLFLEET_REDIS_URL on a port nothing listens on
    env = {
        "PYTHONPATH": REPO_ROOT,
        "TOOLFLEET_REDIS_URL": closed_url,
        "TOOLFLEET_BROKER_URL": None,
        "TOOLFLEET_RESULT_BACKEND": None,
    }

    # When: `toolfleet tools` runs
    started = time.monotonic()
    done = toolfleet("tools", cwd=Path(REPO_ROOT), env=env, timeout_s=30)
    elapsed = time.monotonic() - started

    # Then: it exits 2 within seconds, saying where it could not read the catalog from
    assert done.returncode == 2, done
    assert elapsed < 10
    assert done.stdout == ""
    assert f"cannot read the catalog from Redis at {closed_url} (TOOLFLEET_REDIS_URL)" in done.stderr
    assert "Connection refused" in done.stderr


# -- 3. the broker back while calls keep coming --------------------------------------------------


def test_calls_coming_faster_than_the_outage_hold_are_published_once_the_broker_is_back(
    up: PrivateRedis, private_executor: CeleryExecutor, ledger: Path
) -> None:
    # Given: Redis stopped; one call every 0.2 s, more often than the 1 s a refused publish fails the
    # next calls at once: each fails with BrokerUnavailable
    invocation = Invocation()
    definition = private_executor.definition("rf_sleep")

    async def calls_until_one_succeeds(up_again: threading.Event) -> tuple[list[ToolOutcome], float | None]:
        outcomes: list[ToolOutcome] = []
        for i in range(60):
            request = call(f"c{i}", "rf_sleep", ledger=str(ledger), key=f"k{i}", seconds=0)
            outcome = await private_executor.execute(request, definition, invocation)
            outcomes.append(outcome)
            if outcome.kind is OutcomeKind.SUCCESS:
                return outcomes, time.monotonic()
            if len(outcomes) == 5:
                up_again.set()
            await asyncio.sleep(0.2)
        return outcomes, None

    up.stop()
    up_again = threading.Event()
    restarted: list[float] = []
    restarter = threading.Thread(target=lambda: (up_again.wait(30), restarted.append(up.start())))
    restarter.start()

    # When: Redis is started again while the calls keep coming
    try:
        outcomes, succeeded_at = asyncio.run(calls_until_one_succeeds(up_again))
    finally:
        restarter.join(30)
        up.ensure_running()

    # Then: those before failed as the broker was unreachable, and a call succeeds within seconds of
    # Redis answering again: the calls failed at once never keep the broker taken for down
    assert outcomes[0].error_type == "BrokerUnavailable"
    assert {o.error_type for o in outcomes[:-1]} == {"BrokerUnavailable"}, [o.text for o in outcomes]
    assert succeeded_at is not None, [o.text for o in outcomes[-3:]]
    print(f"\nbroker back: a call succeeded {succeeded_at - restarted[0]:.2f} s after Redis answered")
    assert succeeded_at - restarted[0] < RECOVERY_BOUND_S
