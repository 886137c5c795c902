"""One list of tool calls, run in-process (`LocalExecutor`) and on worker pools (`CeleryExecutor`).

The same call must end in the same outcome wherever it runs: `ToolOutcome.to_json()` is compared
field by field between the two executors, and each case also pins the exact expected outcome so a
shared mistake cannot pass. (`task_id`, `pool` and `worker` say where a call ran; they are not part
of `to_json()` and are checked separately.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import tests.integration.tools as tools_module
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.executors.local import LocalExecutor
from workers import OutcomeKind, ToolDefinition, ToolExecutionRequest, ToolOutcome
from workers.calls.invocation import Invocation, InvocationContext
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.broker]

INVOCATION_ID = uuid.uuid4()
INVOCATION = Invocation(
    InvocationContext(invocation_id=INVOCATION_ID, memory_id="m-7", user_message="hi"), {"k": "v"}
)


def _expected(kind: OutcomeKind, text: str, **fields: Any) -> dict[str, Any]:
    """The `to_json()` of an outcome: the given fields, the rest unset (absent on the wire)."""
    outcome: dict[str, Any] = {
        "kind": kind.value,
        "text": text,
        "contents": None,
        "result_object": None,
        "attributes": {},
        "error_type": None,
        "message_for_llm": None,
        "parameter_changes": {},
        "error_type_name": None,
        "error_cause": None,
    }
    unknown = set(fields) - set(outcome)
    assert not unknown, f"not outcome fields: {unknown}"
    outcome.update(fields)
    maps = ("attributes", "parameter_changes")
    unset = {k for k, v in outcome.items() if v is None or (k in maps and not v)}
    return {k: v for k, v in outcome.items() if k not in unset}


def _args_error(text: str) -> dict[str, Any]:
    return _expected(
        OutcomeKind.ARGUMENTS_ERROR,
        text,
        error_type="ToolArgumentsError",
        error_type_name="workers.errors.ToolArgumentsError",
    )


@dataclass(frozen=True)
class Case:
    id: str
    tool: str
    arguments: str  # "@KEY@" becomes a fresh key for every call
    expected: dict[str, Any]
    calls: int = 1  # the same call repeated, one after another: each must give `expected`
    timeout: float | None = None  # a deadline replacing the tool's own
    bug: str | None = None  # a known product bug: the case is a strict xfail


DEFAULTS_JSON = '{"tags":["a","mutated"],"point":{"x":1,"y":2},"limit":10}'
INJECTED_JSON = (
    f'{{"params":{{"k":"v"}},"invocation_id":"{INVOCATION_ID}","memory_id":"m-7","user_message":"hi"}}'
)


def _tagged(case_id: str, n: int) -> Case:
    """`tagged` called with value `n`: the value comes back as JSON text and as an object, and `n` as an
    attribute of the execution."""
    return Case(
        case_id,
        "tagged",
        f'{{"value": {n}}}',
        _expected(
            OutcomeKind.SUCCESS,
            f'{{"value":{n}}}',
            result_object={"value": n},
            attributes={"source": "tagged", "n": n},
        ),
    )


CASES = [
    # -- success and result conversion
    Case(
        "success",
        "echo",
        '{"text": "hi", "times": 3}',
        _expected(OutcomeKind.SUCCESS, "hi hi hi", result_object="hi hi hi"),
    ),
    Case(
        "str-result-unicode",
        "echo",
        '{"text": "héllo ✓ \\"q\\""}',
        _expected(OutcomeKind.SUCCESS, 'héllo ✓ "q"', result_object='héllo ✓ "q"'),
    ),
    Case(
        "int-from-padded-string",
        "echo",
        '{"text": "x", "times": " 2 "}',
        _expected(OutcomeKind.SUCCESS, "x x", result_object="x x"),
    ),
    Case("none-is-success", "nothing", "", _expected(OutcomeKind.SUCCESS, "Success")),
    Case(
        "compact-json-dict-and-dataclass",
        "defaults",
        '{"tags": ["x"], "limit": 3}',
        _expected(
            OutcomeKind.SUCCESS,
            '{"tags":["x","mutated"],"point":{"x":1,"y":2},"limit":3}',
            result_object={"tags": ["x", "mutated"], "point": {"x": 1, "y": 2}, "limit": 3},
        ),
    ),
    Case(
        "defaults-do-not-leak-between-calls",
        "defaults",
        "{}",
        _expected(
            OutcomeKind.SUCCESS,
            DEFAULTS_JSON,
            result_object={"tags": ["a", "mutated"], "point": {"x": 1, "y": 2}, "limit": 10},
        ),
        calls=2,
    ),
    _tagged("large-int-keeps-precision", 9007199254740993),
    # -- arguments errors
    Case(
        "args-wrong-type",
        "echo",
        '{"text": "hi", "times": "banana"}',
        _args_error('Argument "times" is not convertable to int, got str: <banana>'),
    ),
    Case(
        "args-non-integer",
        "echo",
        '{"text": "hi", "times": 1.5}',
        _args_error('Argument "times" has non-integer value for int: <1.5>'),
    ),
    Case(
        "args-missing-required",
        "echo",
        '{"times": 2}',
        _args_error('Required parameter "text" of tool "echo" is missing'),
    ),
    Case(
        "args-garbage-json",
        "echo",
        '{"text": "hi", ',
        _args_error(
            'Arguments of tool "echo" are not valid JSON: '
            "Expecting property name enclosed in double quotes: line 1 column 15 (char 14)"
        ),
    ),
    Case(
        "args-not-json-at-all",
        "echo",
        "not json at all",
        _args_error('Arguments of tool "echo" are not valid JSON: Expecting value: line 1 column 1 (char 0)'),
    ),
    # -- execution errors
    Case(
        "exec-plain-value-error",
        "fail",
        '{"how": "other"}',
        _expected(
            OutcomeKind.EXECUTION_ERROR,
            "broken: other",
            error_type="ValueError",
            error_type_name="ValueError",
        ),
    ),
    Case(
        "exec-empty-message-is-type-name",
        "fail",
        '{"how": "empty"}',
        _expected(
            OutcomeKind.EXECUTION_ERROR,
            "RuntimeError",
            error_type="RuntimeError",
            error_type_name="RuntimeError",
        ),
    ),
    Case(
        "exec-visible-to-llm",
        "fail",
        '{"how": "visible"}',
        _expected(
            OutcomeKind.EXECUTION_ERROR,
            "card declined",
            error_type="Declined",
            message_for_llm="card declined",
            error_type_name="tests.integration.tools.Declined",
        ),
    ),
    Case(
        "exec-visible-blank-is-unmarked",
        "fail",
        '{"how": "visible_blank"}',
        _expected(
            OutcomeKind.EXECUTION_ERROR,
            "   ",
            error_type="Declined",
            message_for_llm=None,
            error_type_name="tests.integration.tools.Declined",
        ),
    ),
    # -- invocation data
    Case(
        "injected-parameters-context-memory-id",
        "injected",
        "",
        _expected(
            OutcomeKind.SUCCESS,
            INJECTED_JSON,
            result_object={
                "params": {"k": "v"},
                "invocation_id": str(INVOCATION_ID),
                "memory_id": "m-7",
                "user_message": "hi",
            },
        ),
    ),
    Case(
        "parameter-changes-new-key",
        "remember",
        '{"key": "k2", "value": "v2"}',
        _expected(
            OutcomeKind.SUCCESS, "remembered", result_object="remembered", parameter_changes={"k2": "v2"}
        ),
    ),
    Case(
        "parameter-changes-overwrite",
        "remember",
        '{"key": "k", "value": "w"}',
        _expected(
            OutcomeKind.SUCCESS, "remembered", result_object="remembered", parameter_changes={"k": "w"}
        ),
    ),
    Case(
        "parameter-unchanged-is-no-change",
        "remember",
        '{"key": "k", "value": "v"}',
        _expected(OutcomeKind.SUCCESS, "remembered", result_object="remembered", parameter_changes={}),
    ),
    # -- deadlines and retries
    Case(
        "deadline",
        "slow",
        '{"seconds": 1}',
        _expected(
            OutcomeKind.TIMED_OUT, "Tool 'slow' did not finish within 0.3 s", error_type="TimeoutError"
        ),
        timeout=0.3,
    ),
    Case(
        "transient-failure-retried",
        "flaky",
        '{"key": "@KEY@", "failures": 2}',
        _expected(OutcomeKind.SUCCESS, "3", result_object=3),
    ),
    Case(
        "transient-failure-retries-exhausted",
        "flaky",
        '{"key": "@KEY@", "failures": 5}',
        _expected(
            OutcomeKind.EXECUTION_ERROR,
            "attempt 4 failed",
            error_type="Flaky",
            error_type_name="tests.integration.tools.Flaky",
        ),
    ),
    # -- multimodal and attributes
    Case(
        "multimodal-picture",
        "picture",
        '{"caption": "a cat"}',
        _expected(
            OutcomeKind.SUCCESS,
            "a cat",
            contents=[
                {"type": "text", "text": "a cat"},
                {
                    "type": "image",
                    "image": {"base64_data": "iVBORw0KGgo=", "mime_type": "image/png"},
                    "detail": "auto",
                },
            ],
        ),
    ),
    _tagged("tagged-attributes", 3),
]

CASE_IDS = [case.id for case in CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS), "case ids must be unique"
PARAMS = [
    pytest.param(
        case, id=case.id, marks=[pytest.mark.xfail(strict=True, reason=case.bug)] if case.bug else []
    )
    for case in CASES
]


@pytest.fixture(scope="module")
def executors(pools: dict[str, WorkerProcess], settings: Settings) -> Iterator[dict[str, Any]]:
    local = LocalExecutor(tools=[tools_module])
    celery = CeleryExecutor(settings=settings)
    try:
        yield {"local": local, "celery": celery}
    finally:
        local.close()
        celery.close()


def _definition(executor: Any, case: Case) -> ToolDefinition | None:
    """`None` (the executor looks the tool up), or the tool with the case's deadline."""
    if case.timeout is None:
        return None
    find = executor.definition if isinstance(executor, CeleryExecutor) else executor.registry.get
    definition = find(case.tool)
    assert definition is not None
    return dataclasses.replace(
        definition, options=dataclasses.replace(definition.options, timeout=case.timeout)
    )


def _run(executor: Any, case: Case) -> list[ToolOutcome]:
    async def calls() -> list[ToolOutcome]:
        outcomes = []
        for _ in range(case.calls):
            arguments = case.arguments.replace("@KEY@", uuid.uuid4().hex)
            # a call of its own each time: one call id is one call, run once
            request = ToolExecutionRequest(f"call-{uuid.uuid4().hex}", case.tool, arguments)
            outcomes.append(await executor.execute(request, _definition(executor, case), INVOCATION))
        return outcomes

    return asyncio.run(calls())


@pytest.mark.parametrize("case", PARAMS)
@pytest.mark.parametrize("kind", ["local", "celery"])
def test_each_executor_gives_the_pinned_outcome(kind: str, case: Case, executors: dict[str, Any]) -> None:
    # given: the executor of that kind, and a call whose outcome is known exactly
    executor = executors[kind]

    # when: the call runs (`case.calls` times, one after another)
    outcomes = _run(executor, case)

    # then: every outcome is exactly the pinned one, and says where it ran
    assert [o.to_json() for o in outcomes] == [case.expected] * case.calls
    for outcome in outcomes:
        assert outcome.kind is OutcomeKind(case.expected["kind"])
        assert outcome.text == case.expected["text"]
        if kind == "celery":
            assert outcome.pool == "alpha"
            # a call abandoned at its deadline has no result to say which worker took it
            timed_out = outcome.kind is OutcomeKind.TIMED_OUT
            assert outcome.worker == (None if timed_out else "alpha@integration")
            assert outcome.task_id is not None
        else:
            assert (outcome.pool, outcome.worker, outcome.task_id) == (None, None, None)


@pytest.mark.parametrize("case", PARAMS)
def test_local_and_celery_outcomes_are_identical(case: Case, executors: dict[str, Any]) -> None:
    # given: the same call for the in-process executor and for the worker pools

    # when: it runs on both
    local = [o.to_json() for o in _run(executors["local"], case)]
    celery = [o.to_json() for o in _run(executors["celery"], case)]

    # then: the outcomes are identical, and are the pinned ones
    assert celery == local
    assert local == [case.expected] * case.calls
