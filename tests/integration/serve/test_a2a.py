"""A2A on `toolfleet serve`, driven by the official `a2a-sdk` client: the agent found by its card, a
message answered as a completed task (its tool calls on the fleet's workers), a context continued
as one conversation, a stream of the task's progress, a task read back on another replica, and a long
one cancelled; a key is needed for calls, and another tenant's task is not found."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageRequest,
    TaskNotFoundError,
    TaskState,
)

from tests.integration.serve.replicas import AGENT, API_KEY, Replica

pytestmark = pytest.mark.integration

OTHER_KEY = "sk-a2a-globex"


@pytest.fixture(scope="module")
def replica_changes() -> dict[str, str | None]:
    """The replicas know a key of another tenant too."""
    return {"TOOLFLEET_API_KEYS": f"old-key,{API_KEY},globex:{OTHER_KEY}"}


async def _client(replica: Replica, *, streaming: bool, key: str = API_KEY, polling: bool = False) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    card = await A2ACardResolver(http, replica.root).get_agent_card()
    config = ClientConfig(streaming=streaming, polling=polling, httpx_client=http)
    return ClientFactory(config).create(card), http


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())  # type: ignore[arg-type]


def _ask(text: str, context: str | None = None) -> SendMessageRequest:
    message = new_text_message(text, role=Role.ROLE_USER)
    if context is not None:
        message.context_id = context
    return SendMessageRequest(message=message)


async def _told(events: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in events]


def test_the_card_names_the_agent_and_its_endpoint(replicas: tuple[Replica, Replica]) -> None:
    first, _ = replicas
    card = httpx.get(f"{first.root}/.well-known/agent-card.json", timeout=10).json()
    own = httpx.get(f"{first.root}/a2a/{AGENT}/.well-known/agent-card.json", timeout=10).json()

    assert card["url"] == own["url"] == f"{first.root}/a2a/{AGENT}"
    assert card["protocolVersion"] == "0.3.0" and card["capabilities"]["streaming"] is True
    assert card["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}


def test_a_message_is_answered_as_a_completed_task_and_its_context_is_one_conversation(
    replicas: tuple[Replica, Replica],
) -> None:
    first, second = replicas
    context = f"a2a-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[Any, Any, Any]:
        client, http = await _client(first, streaming=False)
        try:
            [added] = await _told(client.send_message(_ask("add 2 3", context)))
            [heard] = await _told(client.send_message(_ask("and now?", context)))
        finally:
            await http.aclose()
        other, http = await _client(second, streaming=False)
        try:
            again = await other.get_task(GetTaskRequest(id=added.task.id))
        finally:
            await http.aclose()
        return added.task, heard.task, again

    added, heard, again = run(scenario)

    assert added.status.state == TaskState.TASK_STATE_COMPLETED
    assert added.artifacts[0].parts[0].text == "done: 5"  # the add ran on the fleet's worker
    assert heard.artifacts[0].parts[0].text == "heard: add 2 3 | and now?"  # one conversation
    assert (again.id, again.status.state) == (added.id, TaskState.TASK_STATE_COMPLETED)
    assert again.artifacts[0].parts[0].text == "done: 5"


def test_a_streamed_task_tells_its_calls_then_its_answer(replicas: tuple[Replica, Replica]) -> None:
    first, _ = replicas

    async def scenario() -> list[Any]:
        client, http = await _client(first, streaming=True)
        try:
            return await _told(client.send_message(_ask("add 1 1 & add 2 2")))
        finally:
            await http.aclose()

    events = run(scenario)
    kinds = [e.WhichOneof("payload") for e in events]

    assert kinds[0] == "task" and kinds[-1] == "status_update"
    working = [e.status_update.status.message.parts[0].text for e in events if e.HasField("status_update")][
        :-1
    ]
    assert sorted(working) == ["tool add ended (success)"] * 2 + ["tool add running"] * 2
    [artifact] = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert artifact.parts[0].text == "done: 2 | 4"
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def test_a_long_task_is_cancelled_and_another_tenant_cannot_see_it(
    replicas: tuple[Replica, Replica], ns: str
) -> None:
    first, second = replicas

    async def scenario() -> tuple[Any, Any, Any]:
        client, http = await _client(first, streaming=False, polling=True)
        try:
            [submitted] = await _told(client.send_message(_ask(f"nap {ns} 30")))
            task_id = submitted.task.id
            await asyncio.sleep(1.0)
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        finally:
            await http.aclose()
        stranger, http = await _client(second, streaming=False, key=OTHER_KEY)
        try:
            with pytest.raises(TaskNotFoundError):
                await stranger.get_task(GetTaskRequest(id=task_id))
        finally:
            await http.aclose()
        return submitted.task, cancelled, task_id

    submitted, cancelled, task_id = run(scenario)

    assert submitted.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert (cancelled.id, cancelled.status.state) == (task_id, TaskState.TASK_STATE_CANCELED)


def test_calls_need_a_key(replicas: tuple[Replica, Replica]) -> None:
    first, _ = replicas
    body = {"jsonrpc": "2.0", "id": "1", "method": "tasks/get", "params": {"id": str(uuid.uuid4())}}

    refused = httpx.post(f"{first.root}/a2a/{AGENT}", json=body, timeout=10)
    unknown = httpx.post(
        f"{first.root}/a2a/{AGENT}", json=body, timeout=10, headers={"Authorization": f"Bearer {API_KEY}"}
    )

    assert refused.status_code == 401
    assert unknown.json()["error"]["code"] == -32001
