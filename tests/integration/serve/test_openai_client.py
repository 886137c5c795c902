"""The official `openai` client talks to two `toolfleet serve` replicas as to a model: the agent runs
its tool loop on the worker pool and answers; a conversation keeps its memory whichever replica
takes a turn; streaming ends with usage and `[DONE]`."""

from __future__ import annotations

import asyncio
import uuid

import openai
import pytest

from tests.integration.serve.replicas import AGENT, API_KEY, Replica

pytestmark = pytest.mark.integration


def _client(replica: Replica) -> openai.OpenAI:
    return openai.OpenAI(base_url=replica.base_url, api_key=API_KEY, max_retries=0, timeout=30)


def test_models_lists_the_agents(replicas: tuple[Replica, Replica]) -> None:
    models = _client(replicas[0]).models.list()

    assert [m.id for m in models.data] == [AGENT]


def test_a_completion_runs_the_tool_on_the_worker_pool(replicas: tuple[Replica, Replica]) -> None:
    completion = _client(replicas[0]).chat.completions.create(
        model=AGENT, messages=[{"role": "user", "content": "add 2 3"}]
    )

    assert completion.choices[0].message.content == "done: 5"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == AGENT
    assert completion.usage is not None and completion.usage.total_tokens == 30  # two model calls


def test_without_a_conversation_id_the_request_carries_the_history(replicas: tuple[Replica, Replica]) -> None:
    completion = _client(replicas[1]).chat.completions.create(
        model=AGENT,
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "heard: first"},
            {"role": "user", "content": "second"},
        ],
    )

    assert completion.choices[0].message.content == "heard: first | second"


def test_a_conversation_keeps_its_memory_across_replicas(replicas: tuple[Replica, Replica]) -> None:
    conversation = f"conv-{uuid.uuid4().hex}"
    answers = []
    for turn, replica in enumerate([*replicas, *replicas]):
        completion = _client(replica).chat.completions.create(
            model=AGENT,
            messages=[{"role": "user", "content": f"turn{turn}"}],
            metadata={"conversation_id": conversation},
        )
        answers.append(completion.choices[0].message.content)

    assert answers[-1] == "heard: turn0 | turn1 | turn2 | turn3"
    # the header names a conversation as well as metadata does
    header = _client(replicas[1]).chat.completions.create(
        model=AGENT,
        messages=[{"role": "user", "content": "turn4"}],
        extra_headers={"X-Conversation-Id": conversation},
    )
    assert header.choices[0].message.content == "heard: turn0 | turn1 | turn2 | turn3 | turn4"


def test_streaming_yields_the_answer_then_usage(replicas: tuple[Replica, Replica]) -> None:
    stream = _client(replicas[1]).chat.completions.create(
        model=AGENT,
        messages=[{"role": "user", "content": "add 20 22"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() == "done: 42"
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishing == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 30


def test_the_async_client_streams_and_completes(replicas: tuple[Replica, Replica]) -> None:
    async def both() -> tuple[str | None, str]:
        client = openai.AsyncOpenAI(base_url=replicas[0].base_url, api_key=API_KEY, max_retries=0, timeout=30)
        whole = await client.chat.completions.create(
            model=AGENT, messages=[{"role": "user", "content": "add 1 1"}]
        )
        streamed = await client.chat.completions.create(
            model=AGENT, messages=[{"role": "user", "content": "add 2 2"}], stream=True
        )
        parts = [c.choices[0].delta.content or "" async for c in streamed if c.choices]
        await client.close()
        return whole.choices[0].message.content, "".join(parts)

    whole, streamed = asyncio.run(both())

    assert whole == "done: 2"
    assert streamed == "done: 4"


def test_one_agent_gives_one_outcome_streamed_or_not_when_a_tool_raises(
    replicas: tuple[Replica, Replica], ns: str
) -> None:
    # given: a request whose one call raises an error not marked for the model
    messages = [{"role": "user", "content": f"crash {ns}"}]
    client = _client(replicas[0])

    # when: it is asked whole, then streamed
    whole = client.chat.completions.create(model=AGENT, messages=messages)  # type: ignore[arg-type]
    chunks = list(client.chat.completions.create(model=AGENT, messages=messages, stream=True))  # type: ignore[arg-type]

    # then: both answer alike: the model read the tool's error (the served defaults, either way)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content == streamed == f"done: the printer of {ns} caught fire"
    assert whole.choices[0].finish_reason == "stop"
