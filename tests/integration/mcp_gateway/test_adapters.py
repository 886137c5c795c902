"""The fleet's tools in other frameworks' agent loops, each driven by that framework's own test model:
LangChain's `create_agent` and LangGraph's `ToolNode`, the OpenAI Agents SDK's `Runner`, and a Pydantic AI
`Agent`; each call lands on the worker of the tool's pool and its result (or its failure, or its
progress) comes back the framework's way."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from agents import Agent, ModelResponse, Runner, Usage, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.models.interface import Model
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import ModelResponse as PydanticResponse
from pydantic_ai import TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from orchestrator.integrations import langchain, openai_agents, pydantic_ai
from orchestrator.integrations.fleet import FleetClient
from tests.integration.mcp_gateway import tools
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def fleet(settings: Settings, gateway_worker: WorkerProcess) -> Iterator[FleetClient]:
    client = FleetClient(pools=[tools.POOL], settings=settings)
    yield client
    client.close()


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "args": arguments, "id": f"call_{name}", "type": "tool_call"}


class ToolCallingFakeModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering its messages in turn, tool calls included."""

    disable_streaming: bool = True

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


class Progress(BaseCallbackHandler):
    def __init__(self) -> None:
        self.heard: list[dict[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == langchain.PROGRESS_EVENT:
            self.heard.append(data)


def test_a_langchain_agent_calls_fleet_tools_on_their_worker(
    fleet: FleetClient, gateway_worker: WorkerProcess
) -> None:
    ns = uuid.uuid4().hex[:8]
    model = ToolCallingFakeModel(
        messages=iter(
            [
                AIMessage(content="", tool_calls=[_call("add", a=20, b=22), _call("walk", ns=ns, steps=3)]),
                AIMessage(content="It is 42."),
            ]
        )
    )
    progress = Progress()

    agent = create_agent(model, langchain.fleet_tools(fleet=fleet))
    result = agent.invoke({"messages": [HumanMessage("what is 20 + 22?")]}, {"callbacks": [progress]})

    told = {m.name: m for m in result["messages"] if isinstance(m, ToolMessage)}
    assert told["add"].content == f"42 (on {gateway_worker.pid})"
    assert told["walk"].content == "walked 3 steps"
    assert [p["message"] for p in progress.heard] == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert result["messages"][-1].content == "It is 42."


def test_langgraphs_tool_node_runs_fleet_tools_async_and_tells_a_failure(fleet: FleetClient) -> None:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode(langchain.fleet_tools(fleet=fleet)))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    asked = AIMessage(content="", tool_calls=[_call("refuse", reason="closed"), _call("add", a=1, b=1)])

    result = asyncio.run(graph.compile().ainvoke({"messages": [asked]}))

    told = {m.name: m for m in result["messages"] if isinstance(m, ToolMessage)}
    assert (told["refuse"].status, told["refuse"].content) == ("error", "refused: closed")
    assert told["add"].status == "success" and told["add"].content.startswith("2 (on ")


class ScriptedModel(Model):
    """The Agents SDK's model interface, answering from a script: a tool call, then a message."""

    def __init__(self, *items: Any) -> None:
        self.items = list(items)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=[self.items.pop(0)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_an_openai_agents_sdk_run_calls_fleet_tools_with_strict_schemas(
    fleet: FleetClient, gateway_worker: WorkerProcess
) -> None:
    set_tracing_disabled(True)
    ns = uuid.uuid4().hex[:8]
    heard: list[str | None] = []
    function_tools = openai_agents.fleet_tools(
        fleet=fleet, on_progress=lambda ctx, r: heard.append(r.message)
    )
    call = ResponseFunctionToolCall(
        type="function_call", call_id="call_1", name="walk", arguments=json.dumps({"ns": ns, "steps": 2})
    )
    fails = ResponseFunctionToolCall(
        type="function_call", call_id="call_2", name="refuse", arguments=json.dumps({"reason": "no"})
    )
    say = ResponseOutputMessage(
        type="message",
        id="msg_1",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="Walked.", annotations=[])],
    )
    agent = Agent(name="walker", model=ScriptedModel(call, fails, say), tools=function_tools)

    result = asyncio.run(Runner.run(agent, "walk twice"))

    outputs = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert outputs == ["walked 2 steps", "Error: refused: no"]
    assert heard == ["step 1 of 2", "step 2 of 2"]
    assert result.final_output == "Walked."
    add = next(t for t in function_tools if t.name == "add")
    assert add.strict_json_schema and add.params_json_schema["additionalProperties"] is False


def test_a_pydantic_ai_agent_calls_fleet_tools_through_the_toolset(
    fleet: FleetClient, gateway_worker: WorkerProcess
) -> None:
    ns = uuid.uuid4().hex[:8]

    def model(messages: list[Any], info: AgentInfo) -> PydanticResponse:
        if len(messages) == 1:
            offered = sorted(t.name for t in info.function_tools)
            assert offered == ["add", "export", "refuse", "walk", "whose", "wire"]
            return PydanticResponse(
                parts=[
                    ToolCallPart(tool_name="add", args={"a": 2, "b": 40}, tool_call_id="c1"),
                    ToolCallPart(tool_name="walk", args={"ns": ns, "steps": 2}, tool_call_id="c2"),
                ]
            )
        returned = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        return PydanticResponse(parts=[TextPart(" | ".join(str(p.content) for p in returned))])

    async def streamed(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
        for index, part in enumerate(model(messages, info).parts):
            if isinstance(part, ToolCallPart):
                arguments = json.dumps(part.args)
                yield {
                    index: DeltaToolCall(
                        name=part.tool_name, json_args=arguments, tool_call_id=part.tool_call_id
                    )
                }
            elif isinstance(part, TextPart):
                yield part.content

    async def run() -> tuple[str, list[Any]]:
        function_model = FunctionModel(model, stream_function=streamed)
        agent = PydanticAgent(function_model, toolsets=[pydantic_ai.FleetToolset(fleet=fleet)])
        events: list[Any] = []

        async def handler(ctx: Any, stream: Any) -> None:
            async for event in stream:
                events.append(event)

        result = await agent.run("go", event_stream_handler=handler)
        return result.output, events

    output, events = asyncio.run(run())

    assert output == f"42 (on {gateway_worker.pid}) | walked 2 steps"
    progress = [e for e in events if isinstance(e, pydantic_ai.FleetProgress)]
    assert [p.message for p in progress] == ["step 1 of 2", "step 2 of 2"]
