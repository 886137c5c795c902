"""How a chat completion's handler tells its invocation (`orchestrator.server.completions`): through a
quiet stretch a streaming client gets keep-alive comments; past a drain's grace an OpenAI error then
`[DONE]`; a client that leaves cancels the invocation. In-process, the run told by hand."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from orchestrator.errors import InvocationTakenOverError
from orchestrator.messages import AiMessage
from orchestrator.models.base import ChatResponse, FinishReason, PartialResponse
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


def test_an_answer_whose_text_stopped_streaming_before_its_end_is_sent_whole() -> None:
    async def scenario() -> list[str]:
        heard = Heard(Replica(), "1")  # type: ignore[arg-type]
        heard.put(PartialResponse("done: o"))
        heard.put(complete("done: ok | ok"))  # its end, as the journal had it after the run failed
        return await read(heard)

    told = data(asyncio.run(scenario()))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in told[:-1] if c["choices"])

    assert text == "done: ok | ok"


def test_a_run_taken_over_by_another_replica_asks_its_client_to_send_again() -> None:
    async def scenario() -> list[str]:
        heard = Heard(Replica(), "1")  # type: ignore[arg-type]
        heard.put(InvocationTakenOverError("invocation 1 was taken over by vm:2"))
        return await read(heard)

    told = data(asyncio.run(scenario()))

    assert told[-2]["error"]["code"] == "service_unavailable"
    assert "goes on in another replica" in told[-2]["error"]["message"]
