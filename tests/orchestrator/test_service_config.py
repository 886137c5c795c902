"""`AiService` reads its configuration once: every invocation runs on the same frozen configuration, and
the attributes that show it cannot be changed behind the invocations' backs."""

from __future__ import annotations

import pytest

from orchestrator import (
    AiMessage,
    AiService,
    LocalExecutor,
    MessageWindowChatMemory,
    ScriptedChatModel,
    send_exception_message_to_llm,
)
from orchestrator.memory import ChatMemory
from workers import ToolExecutionRequest, tool


class Echo:
    @tool("Says the text back")
    def echo(self, text: str) -> str:
        return text


def _model() -> ScriptedChatModel:
    request = ToolExecutionRequest("call-1", "echo", '{"text": "hi"}')
    return ScriptedChatModel([AiMessage(tool_execution_requests=[request]), "done"])


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("chat_model", ScriptedChatModel([])),
        ("executor", LocalExecutor()),
        ("max_fanout", 2),
        ("max_tool_calling_round_trips", 1),
        ("execute_tools_concurrently", False),
        ("tool_execution_error_handler", send_exception_message_to_llm()),
        ("system_message", "Be brief."),
    ],
)
def test_the_configuration_cannot_be_changed_after_the_service_is_built(
    attribute: str, value: object
) -> None:
    # given a built service
    service = AiService(chat_model=_model(), tools=[Echo()], executor=LocalExecutor())
    before = getattr(service, attribute)

    # when an attribute of its configuration is set, then it is refused
    with pytest.raises(AttributeError):
        setattr(service, attribute, value)
    # and the configuration is as it was built
    assert getattr(service, attribute) is before


def test_the_attributes_show_the_configuration_as_given() -> None:
    # given a service built with keyword configuration
    handler = send_exception_message_to_llm()
    model = _model()
    service = AiService(
        chat_model=model,
        tools=[Echo()],
        executor=LocalExecutor(),
        max_fanout=3,
        max_tool_calling_round_trips=7,
        tool_arguments_error_handler=handler,
        name="clerk",
    )

    # then its attributes show what was given, and the defaults of what was not
    assert service.chat_model is model
    assert (service.max_fanout, service.max_tool_calling_round_trips, service.name) == (3, 7, "clerk")
    assert service.tool_arguments_error_handler is handler
    assert service.tool_execution_error_handler is None
    assert service.execute_tools_concurrently is True
    assert [spec.name for spec in service.tool_specifications()] == ["echo"]


def test_each_memory_id_gets_one_memory_made_on_first_use() -> None:
    # given a service whose memories come from a provider
    made: list[str] = []

    def provider(memory_id: str) -> ChatMemory:
        made.append(memory_id)
        return MessageWindowChatMemory(10)

    service = AiService(chat_model=_model(), tools=[Echo()], chat_memory_provider=provider)

    # when an invocation runs under memory id "u1", and its memory is asked for twice
    assert service.chat("go", memory_id="u1").content == "done"
    first, again = service.memory("u1"), service.memory("u1")

    # then the provider made one memory for "u1", which holds the conversation
    assert made == ["u1"]
    assert first is again
    kinds = [type(m).__name__ for m in first.messages()]
    assert kinds == ["UserMessage", "AiMessage", "ToolExecutionResultMessage", "AiMessage"]
