"""Parity of what tools and error handlers receive, in-process (`LocalExecutor`) and on a real
worker process over real Redis (`CeleryExecutor`): the identity of a call (`ToolCallIdentity`) in a
tool, its retries and its compensation, and the exception an error handler gets for a failed call.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.integration.identity_tools as it
from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    RemoteToolError,
    ScriptedChatModel,
    ToolErrorContext,
    ToolErrorHandlerResult,
    send_exception_message_to_llm,
)
from orchestrator.handlers import visible_message
from tests.integration.scripts import call
from tests.integration.worker_processes import tool_worker
from workers.calls.invocation import Invocation, InvocationContext
from workers.calls.runner import qualified_name
from workers.runtime.process import WorkerProcess
from workers.tools import discover_tools

pytestmark = pytest.mark.integration


# Where the shared `executor` fixture (tests/integration/conftest.py) runs this module's calls.
WORKERS = ["ident_worker"]
EXECUTOR_OPTIONS = {"retry_backoff_s": 0.05, "retry_backoff_max_s": 0.2}


@pytest.fixture(scope="module")
def ident_worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    """A worker process of its own serving pool `ident` (tests/integration/identity_tools.py)."""
    backoff = {"TOOLFLEET_RETRY_BACKOFF_S": "0.05", "TOOLFLEET_RETRY_BACKOFF_MAX_S": "0.2"}
    modules = ["tests.integration.identity_tools"]
    worker = tool_worker(
        redis_url, [it.POOL], modules, worker_logs / "ident.log", "ident@integration", env=backoff
    )
    with worker.running(timeout_s=60):
        yield worker


def _unique(prefix: str) -> str:
    """A seat or label no other test (or executor) uses: recorded identities are kept apart."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _book_then_refuse(seat: str) -> ScriptedChatModel:
    """A model asking, in one batch, to book `seat` (call c-1) and for a refusal (c-2), then saying sorry."""
    calls = [call("c-1", "book", seat=seat), call("c-2", "refuse", seat=seat)]
    return ScriptedChatModel([AiMessage(tool_execution_requests=calls), "sorry"])


def _seat_service(model: ScriptedChatModel, executor: Any) -> AiService:
    """The seat tools, compensated on tool errors, whose messages the model is shown."""
    return AiService(
        chat_model=model,
        tools=[it.seats],
        executor=executor,
        compensate_on_tool_errors=True,
        tool_execution_error_handler=send_exception_message_to_llm(),
    )


# -- ToolCallIdentity -----------------------------------------------------------------------------


def test_a_tool_and_its_compensation_receive_the_same_call_identity(executor: Any) -> None:
    # given: a batch that books a seat, then fails, so the booking is compensated
    seat = _unique("seat")
    model = _book_then_refuse(seat)

    # when
    result = _seat_service(model, executor).chat("book me a seat")

    # then: the tool received the call's identity: ids, the idempotency key, first attempt
    invocation_id = result.invocation_id
    key = f"{invocation_id}:c-1"
    expected = {"invocation_id": invocation_id, "call_id": "c-1", "idempotency_key": key, "attempt": 1}
    book = result.tool_executions[0]
    assert book.status == "rolled_back"
    assert it.recorded(f"book:{seat}") == [expected]
    # and: its compensation received the very same identity
    assert it.recorded(f"unbook:{seat}") == [expected]
    # and: the identity was never shown to the model
    booked = next(spec for spec in model.requests[0].tool_specifications if spec.name == "book")
    assert booked.parameters is not None
    assert list(booked.parameters["properties"]) == ["seat"]
    assert "call" not in json.dumps(booked.parameters)


def test_retries_count_attempts_under_one_idempotency_key(executor: Any) -> None:
    # given: a tool that fails its first two attempts with an error it declares retryable
    label = _unique("lucky")
    invocation_id = uuid.uuid4()
    invocation = Invocation(InvocationContext(invocation_id=invocation_id))
    request = call("c-9", "third_time_lucky", label=label)

    # when
    outcome = asyncio.run(executor.execute(request, discover_tools(it.third_time_lucky)[0], invocation))

    # then: three attempts, numbered 1, 2, 3, each with the same key; the third succeeded
    assert (outcome.kind.value, outcome.text) == ("success", "3")
    key = f"{invocation_id}:c-9"
    assert it.recorded(f"lucky:{label}") == [
        {"invocation_id": str(invocation_id), "call_id": "c-9", "idempotency_key": key, "attempt": n}
        for n in (1, 2, 3)
    ]


def test_a_retried_compensation_counts_its_attempts_under_the_call_key(executor: Any) -> None:
    # given: a booking whose compensation fails once before it succeeds
    seat = _unique("stubborn")
    model = _book_then_refuse(seat)

    # when
    result = _seat_service(model, executor).chat("book me a seat")

    # then: the compensation ran twice, attempts 1 and 2, under the booking's own key
    key = f"{result.invocation_id}:c-1"
    assert [(r["idempotency_key"], r["attempt"]) for r in it.recorded(f"unbook:{seat}")] == [
        (key, 1),
        (key, 2),
    ]
    assert result.tool_executions[0].status == "rolled_back"


# -- error handlers -------------------------------------------------------------------------------


def _view(error: BaseException | None) -> dict[str, Any] | None:
    """What a handler can rely on in both executors: the type's qualified name, the message, the
    text chosen for the model, and the same for the direct cause."""
    if error is None:
        return None
    remote = isinstance(error, RemoteToolError)
    return {
        "type_name": error.type_name if remote else qualified_name(type(error)),
        "message": error.message if remote else str(error),
        "for_llm": visible_message(error),
        "cause": _view(error.__cause__),
    }


def _handled(executor: Any, tool_name: str) -> tuple[BaseException, ToolErrorContext, str]:
    seen: list[tuple[BaseException, ToolErrorContext]] = []

    def handler(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        seen.append((error, context))
        return send_exception_message_to_llm()(error, context)

    model = ScriptedChatModel([AiMessage(tool_execution_requests=[call("c-1", tool_name, amount=5)]), "ok"])
    service = AiService(chat_model=model, tools=[it], executor=executor, tool_execution_error_handler=handler)
    result = service.chat("pay")
    assert len(seen) == 1
    return seen[0][0], seen[0][1], result.tool_executions[0].result


DECLINED = "tests.integration.identity_tools.PaymentDeclined"
CASES = {
    # `raise RuntimeError(...) from PaymentDeclined(...)`: the handler gets the cause
    "pay_wrapped": (
        {"type_name": DECLINED, "message": "card declined for 5", "for_llm": None, "cause": None},
        {
            "type_name": "RuntimeError",
            "message": "payment failed",
            "for_llm": None,
            "cause": {
                "type_name": DECLINED,
                "message": "card declined for 5",
                "for_llm": None,
                "cause": None,
            },
        },
        "card declined for 5",
    ),
    # no cause: the handler gets the tool's exception, and raw_error is the same
    "pay_plain": (
        {"type_name": DECLINED, "message": "card declined for 5", "for_llm": None, "cause": None},
        {"type_name": DECLINED, "message": "card declined for 5", "for_llm": None, "cause": None},
        "card declined for 5",
    ),
}


@pytest.mark.parametrize("tool_name", sorted(CASES))
def test_a_handler_receives_the_same_error_in_process_and_on_a_worker(executor: Any, tool_name: str) -> None:
    # given: a tool that fails in a known way, and a handler that records what it receives
    expected_error, expected_raw, expected_text = CASES[tool_name]

    # when
    error, context, text = _handled(executor, tool_name)

    # then: the handler got one level of `__cause__` unwrapping, raw_error the exception before it
    assert _view(error) == expected_error
    assert _view(context.raw_error) == expected_raw
    if context.raw_error.__cause__ is not None:
        assert context.raw_error.__cause__ is error
    # and: in-process it is the tool's live exception; on a worker a RemoteToolError describing it
    if isinstance(executor, CeleryExecutor):
        assert isinstance(error, RemoteToolError)
        assert error.error_type == "PaymentDeclined"
    else:
        assert isinstance(error, it.PaymentDeclined)
    # and: the model read the same text
    assert text == expected_text


def test_a_visible_error_is_not_unwrapped_and_its_cause_stays_away(executor: Any) -> None:
    # given: a tool raising a ToolErrorVisibleToLlm from a cause holding a secret

    # when
    error, context, text = _handled(executor, "pay_visible")

    # then: the handler gets the visible error itself, and the model reads its chosen text
    assert error is context.raw_error
    assert _view(error) is not None
    assert {k: v for k, v in (_view(error) or {}).items() if k != "cause"} == {
        "type_name": "tests.integration.identity_tools.CardHint",
        "message": "try another card",
        "for_llm": "try another card",
    }
    assert text == "try another card"
    # and: on a worker, the cause's text never left the worker
    if isinstance(executor, CeleryExecutor):
        assert error.__cause__ is None
