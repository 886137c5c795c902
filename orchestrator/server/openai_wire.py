"""OpenAI's chat-completions format on the service side: the request a client sends, the conversation
it carries, and the completion or chunks the client reads back.

Only what an agent can honour is read: `model` (the agent's name), `messages`, `stream`,
`stream_options.include_usage`, `metadata.conversation_id` and `user`; sampling options are the
agent's own model's business and are ignored. `tools`, `functions` and `n` > 1 are refused: an agent
runs its own tools server-side and answers once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import ApiError
from orchestrator.messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models.base import FinishReason, TokenUsage
from orchestrator.result import Result
from workers.protocol import ToolExecutionRequest

__all__ = [
    "ChatCompletionRequest",
    "completion",
    "conversation_of",
    "delta_chunk",
    "finish_chunk",
    "parse_request",
    "paused_text",
    "usage_chunk",
]

_FINISH_REASONS = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.TOOL_EXECUTION: "stop",
    FinishReason.BUDGET_EXCEEDED: "length",  # stopped by a limit, as a response cut at max_tokens
}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """The fields of a chat-completions request the service reads; others are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    n: int | None = None


def parse_request(body: bytes, max_messages: int) -> ChatCompletionRequest:
    """The request of `body`, or an `ApiError` (400) naming the field that is wrong."""
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:  # arrays or objects nested deeper than the parser goes
        raise ApiError(400, "the request body is not valid JSON: nested too deeply") from None
    if not isinstance(raw, dict):
        raise ApiError(400, "the request body must be a JSON object")
    for name in ("tools", "functions", "tool_choice", "function_call"):
        if raw.get(name) is not None:  # an empty list too: refused as any other value
            raise ApiError(
                400,
                f"'{name}' is not accepted: the agent runs its own tools on its worker pools and "
                "returns the final answer",
                param=name,
            )
    try:
        request = ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(400, f"invalid request: {param}: {first['msg']}", param=param) from None
    if request.n not in (None, 1):
        raise ApiError(400, "'n' must be 1: an agent answers once", param="n")
    if len(request.messages) > max_messages:
        raise ApiError(
            400, f"too many messages: {len(request.messages)} (at most {max_messages})", param="messages"
        )
    return request


def conversation_of(messages: Sequence[dict[str, Any]]) -> tuple[list[ChatMessage], UserMessage]:
    """The history the messages carry and the new user message (the last one), as toolfleet's types;
    an `ApiError` names the first message that is not one a conversation can hold."""
    history: list[ChatMessage] = []
    tool_names: dict[str, str] = {}
    for index, message in enumerate(messages):
        param = f"messages.{index}"
        role = message.get("role")
        if role in ("system", "developer"):
            history.append(SystemMessage(_text(message.get("content"), param)))
        elif role == "user":
            history.append(UserMessage(_text(message.get("content"), param), name=message.get("name")))
        elif role == "assistant":
            requests = [
                _tool_request(call, f"{param}.tool_calls") for call in message.get("tool_calls") or []
            ]
            tool_names.update((r.id, r.name) for r in requests if r.id)
            content = message.get("content")
            text = _text(content, param) if content not in (None, "", []) else None
            history.append(AiMessage(text=text, tool_execution_requests=requests))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in tool_names:
                raise ApiError(
                    400, f"{param}: a tool message must answer a tool call of an earlier message", param=param
                )
            history.append(
                ToolExecutionResultMessage(call_id, tool_names[call_id], _text(message.get("content"), param))
            )
        else:
            raise ApiError(400, f"{param}: unknown role {role!r}", param=f"{param}.role")
    last = history.pop()
    if not isinstance(last, UserMessage):
        raise ApiError(400, "the last message must be the user's", param=f"messages.{len(messages) - 1}")
    return history, last


def _text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (
                isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
            ):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ApiError(
                    400, f"{param}: only text content parts are accepted, got {kind!r}", param=param
                )
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(
        400, f"{param}: content must be a string or a list of text parts", param=f"{param}.content"
    )


def _tool_request(call: Any, param: str) -> ToolExecutionRequest:
    function = call.get("function") if isinstance(call, dict) else None
    if not (isinstance(function, dict) and isinstance(function.get("name"), str)):
        raise ApiError(400, f"{param}: a tool call needs function.name", param=param)
    return ToolExecutionRequest(call.get("id"), function["name"], str(function.get("arguments") or "{}"))


def completion(
    completion_id: str, agent: str, content: str | None, finish: FinishReason | None, usage: TokenUsage | None
) -> dict[str, Any]:
    """A whole `chat.completion` object."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": agent,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content or "", "refusal": None},
                "finish_reason": _finish(finish),
                "logprobs": None,
            }
        ],
        "usage": _usage(usage),
    }


def delta_chunk(completion_id: str, agent: str, delta: dict[str, Any]) -> dict[str, Any]:
    """A `chat.completion.chunk` carrying a piece of the answer."""
    return _chunk(completion_id, agent, [_choice(delta, None)])


def finish_chunk(completion_id: str, agent: str, reason: FinishReason | None) -> dict[str, Any]:
    """The chunk that ends the answer, with its finish reason."""
    return _chunk(completion_id, agent, [_choice({}, _finish(reason))])


def usage_chunk(completion_id: str, agent: str, usage: TokenUsage | None) -> dict[str, Any]:
    """The last chunk when `stream_options.include_usage`: no choices, the invocation's usage."""
    return {**_chunk(completion_id, agent, []), "usage": _usage(usage)}


def _chunk(completion_id: str, agent: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": agent,
        "choices": choices,
    }


def _choice(delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def paused_text(result: Result) -> str | None:
    """What a chat completion says of an invocation paused for approvals (None when it is not):
    OpenAI's shape has no place for it, so the text names the calls and where to decide them."""
    if result.finish_reason is not FinishReason.APPROVAL_REQUIRED:
        return None
    return waiting_text(str(result.invocation_id), [a.to_json() for a in result.pending_approvals])


def waiting_text(invocation_id: str, approvals: Sequence[Mapping[str, Any]]) -> str:
    """The text of a paused completion, from its waiting calls as JSON (`ApprovalRecord.to_json()`)."""
    calls = ", ".join(f"{a['tool']} (call {a['call_id']})" for a in approvals)
    return (
        f"Waiting for approval: {calls}. Decide with POST /v1/invocations/{invocation_id}/approvals "
        "or `toolfleet approve`."
    )


def paused_object(result: Result) -> dict[str, Any]:
    """The `toolfleet` object of a paused chat completion: the invocation, what waits, where to decide."""
    return waiting_object(str(result.invocation_id), [a.to_json() for a in result.pending_approvals])


def waiting_object(invocation_id: str, approvals: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`paused_object`, from the waiting calls as JSON."""
    return {
        "invocation_id": invocation_id,
        "state": "paused",
        "pending_approvals": list(approvals),
        "decide": f"/v1/invocations/{invocation_id}/approvals",
        "events": f"/v1/invocations/{invocation_id}/events",
    }


def _finish(reason: FinishReason | None) -> str:
    return _FINISH_REASONS.get(reason, "stop") if reason is not None else "stop"


def _usage(usage: TokenUsage | None) -> dict[str, int]:
    prompt = (usage.input_tokens or 0) if usage else 0
    answer = (usage.output_tokens or 0) if usage else 0
    return {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer}
