"""`LocalExecutor`: tool calls run in this process, with the same binding and results as on a worker."""

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from orchestrator import LocalExecutor
from workers import (
    InvocationContext,
    InvocationParameters,
    OutcomeKind,
    ToolExecutionRequest,
    ToolMemoryId,
    tool,
)
from workers.calls.invocation import Invocation
from workers.tools import discover_tools


class BankTools:
    def __init__(self) -> None:
        self.balances: dict[str, float] = {"Ann": 10.0}

    @tool("Credits money to a bank account")
    def credit(self, name: str, amount: float) -> str:
        self.balances[name] = self.balances.get(name, 0.0) + amount
        return f"{name} has {self.balances[name]}"

    @tool
    def close_account(self, name: str) -> None:
        raise ValueError(f"Account {name} is frozen")


@tool
def add(a: int, b: int) -> int:
    return a + b


@tool
async def async_multiply(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a * b


@tool
def slow(n: int) -> int:
    time.sleep(0.2)
    return n


@tool
async def async_slow(n: int) -> int:
    await asyncio.sleep(0.2)
    return n


@tool
def who_runs_me() -> str:
    return threading.current_thread().name


@tool
def remember(memory_id: ToolMemoryId, parameters: InvocationParameters) -> str:
    parameters["last"] = memory_id
    return f"{memory_id}:{parameters['user']}"


@pytest.fixture
def executor() -> Iterator[LocalExecutor]:
    executor = LocalExecutor(
        tools=[BankTools(), add, async_multiply, slow, async_slow, who_runs_me, remember]
    )
    yield executor
    executor.close()


def request(name: str, arguments: str = "{}", call_id: str = "call-1") -> ToolExecutionRequest:
    return ToolExecutionRequest(call_id, name, arguments)


@pytest.mark.parametrize(
    ("name", "arguments", "kind", "text", "error_type"),
    [
        pytest.param(
            "credit",
            '{"name": "Ann", "amount": 5}',
            OutcomeKind.SUCCESS,
            "Ann has 15.0",
            None,
            id="a success",
        ),
        pytest.param(
            "credit",
            '{"name": "Ann", "amount": "lots"}',
            OutcomeKind.ARGUMENTS_ERROR,
            'Argument "amount" is not convertable to float, got str: <lots>',
            "ToolArgumentsError",
            id="an arguments error",
        ),
        pytest.param(
            "add",
            '{"a": 1}',
            OutcomeKind.ARGUMENTS_ERROR,
            'Required parameter "b" of tool "add" is missing',
            "ToolArgumentsError",
            id="a missing argument",
        ),
        pytest.param(
            "close_account",
            '{"name": "Bob"}',
            OutcomeKind.EXECUTION_ERROR,
            "Account Bob is frozen",
            "ValueError",
            id="an execution error",
        ),
        pytest.param(
            "teleport",
            '{"to": "Mars"}',
            OutcomeKind.EXECUTION_ERROR,
            "Unknown tool 'teleport'",
            "UnknownToolError",
            id="an unknown tool, as a structured outcome",
        ),
    ],
)
def test_run_returns_an_outcome(
    executor: LocalExecutor, name: str, arguments: str, kind: OutcomeKind, text: str, error_type: str | None
) -> None:
    outcome = executor.run(request(name, arguments))
    assert (outcome.kind, outcome.text, outcome.error_type) == (kind, text, error_type)
    assert outcome.message_for_llm is None  # none of these errors is marked for the model


def test_execute_from_async_code(executor: LocalExecutor) -> None:
    async def main() -> tuple[str, str]:
        first = await executor.execute(request("add", '{"a": 2, "b": 3}'))
        second = await executor.execute(request("credit", '{"name": "Cy", "amount": 1.5}'))
        return first.text, second.text

    assert asyncio.run(main()) == ("5", "Cy has 1.5")


def test_execute_with_an_explicit_definition(executor: LocalExecutor) -> None:
    definition = discover_tools(add)[0]
    outcome = asyncio.run(executor.execute(request("not-looked-up", '{"a": 1, "b": 1}'), definition))
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "2"


def test_an_async_tool_runs(executor: LocalExecutor) -> None:
    assert executor.run(request("async_multiply", '{"a": 6, "b": 7}')).text == "42"
    outcome = asyncio.run(executor.execute(request("async_multiply", '{"a": 2, "b": 5}')))
    assert (outcome.kind, outcome.text) == (OutcomeKind.SUCCESS, "10")


def test_sync_tools_run_off_the_event_loop_thread(executor: LocalExecutor) -> None:
    outcome = executor.run(request("who_runs_me"))
    assert outcome.text.startswith("toolfleet-tool")


def test_invocation_data_is_injected(executor: LocalExecutor) -> None:
    invocation = Invocation(InvocationContext(memory_id="m7"), {"user": "ann"})
    outcome = executor.run(request("remember"), invocation)
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "m7:ann"
    assert outcome.parameter_changes == {"last": "m7"}
    assert dict(invocation.parameters) == {"user": "ann"}


@pytest.mark.parametrize("tool_name", ["slow", "async_slow"])
def test_calls_run_concurrently(executor: LocalExecutor, tool_name: str) -> None:
    # given 20 calls of a tool that takes 0.2 s each
    requests = [request(tool_name, f'{{"n": {i}}}', call_id=str(i)) for i in range(20)]

    async def main() -> list[str]:
        outcomes = await asyncio.gather(*(executor.execute(r) for r in requests))
        return [o.text for o in outcomes]

    # when they are dispatched at once
    started = time.perf_counter()
    texts = asyncio.run(main())
    elapsed = time.perf_counter() - started
    # then every call succeeded, in request order, far faster than 20 x 0.2 s one after another
    assert texts == [str(i) for i in range(20)]
    assert elapsed < 2.0


def test_close_works_and_can_be_repeated() -> None:
    executor = LocalExecutor(tools=[add])
    assert executor.run(request("add", '{"a": 1, "b": 2}')).text == "3"
    executor.close()
    executor.close()


def test_an_unconvertible_huge_number_is_an_outcome_not_a_raise(executor: LocalExecutor) -> None:
    outcome = executor.run(request("credit", '{"name": "Ann", "amount": 1' + "0" * 400 + "}"))
    assert outcome.kind is OutcomeKind.ARGUMENTS_ERROR
