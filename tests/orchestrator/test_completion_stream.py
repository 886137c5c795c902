"""How a chat completion's handler tells its invocation (`orchestrator.server.completions`): through a
quiet stretch a streaming client gets keep-alive comments; past a drain's grace an OpenAI error then
`[DONE]`; a client that leaves cancels the invocation. In-process, the run told by hand."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from orchestrator.messages import AiMessage
from orchestrator.models.base import ChatResponse, FinishReason
from orchestrator.result import CompleteResponse, Result
from orchestrator.server.completions import Heard, _chunks

HEAD = ("chatcmpl-1", "clerk")


class Replica(SimpleNamespace):
    """What a `Heard` reads of the replica's invocations: those running, and whether a drain's grace
    ran out."""

    def __init__(self) -> None:
        super().__init__(running={}, past_grace=asyncio.Event())


def complete(text: str) -> CompleteResponse:
    result = Result(content=text, finish_reason=FinishReason.STOP, invocation_id="1")
    return CompleteResponse(ChatResponse(AiMessage(text)), result=result)


async def read(heard: Heard) -> list[str]:
    return [chunk async for chunk in _chunks(heard, HEAD, include_usage=False)]


def data(chunks: list[str]) -> list[Any]:
    lines = [line[6:] for chunk in chunks for line in chunk.splitlines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def test_a_quiet_stretch_is_kept_alive_with_comments_then_the_answer_and_done() -> None:
    async def scenario() -> list[str]:
        heard = Heard(Replica(), "1", keepalive_s=0.1)  # type: ignore[arg-type]
        asyncio.get_running_loop().call_later(0.35, heard.put, complete("slept"))
        return await read(heard)

    chunks = asyncio.run(scenario())

    assert 2 <= chunks.count(": keep-alive\n\n") <= 4
    told = data(chunks)
    assert told[-1] == "[DONE]"
    assert told[-2]["choices"][0]["finish_reason"] == "stop"


def test_past_the_drain_grace_a_streaming_client_gets_an_error_then_done() -> None:
    async def scenario() -> tuple[list[str], bool]:
        replica = Replica()
        running = replica.running["1"] = asyncio.ensure_future(asyncio.sleep(30))
        heard = Heard(replica, "1")  # type: ignore[arg-type]
        asyncio.get_running_loop().call_later(0.1, replica.past_grace.set)
        chunks = await read(heard)
        left_to_the_drain = not running.cancelled()
        running.cancel()
        return chunks, left_to_the_drain

    chunks, left_to_the_drain = asyncio.run(scenario())

    told = data(chunks)
    assert told[-1] == "[DONE]"
    assert told[-2]["error"]["code"] == "service_unavailable" and "shut down" in told[-2]["error"]["message"]
    assert left_to_the_drain  # the drain cancels the run itself, and waits for it


def test_a_client_that_leaves_cancels_the_invocation() -> None:
    async def scenario() -> bool:
        replica = Replica()
        running = replica.running["1"] = asyncio.ensure_future(asyncio.sleep(30))
        heard = Heard(replica, "1")  # type: ignore[arg-type]
        chunks = _chunks(heard, HEAD, include_usage=False)
        await anext(chunks)  # the first chunk, then the client goes away
        heard.put(complete("never read"))  # not read: the stream is closed first
        await chunks.aclose()
        await asyncio.sleep(0)
        return running.cancelled()

    assert asyncio.run(scenario()) is True
