"""A2A clients get the files a task's calls made: each artifact of a call is an A2A artifact of one file
part (its name, media type, and a URI that is this service's `GET /v1/artifacts/{id}`, read with the
same bearer key), in the task and, as the call ends, in its stream. Driven by the official `a2a-sdk`
client against a real replica and the worker of `draw` (`test_artifacts_http`'s)."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from tests.integration.serve.artifact_agents import made
from tests.integration.serve.replicas import Replica
from tests.integration.serve.test_a2a import run
from tests.integration.serve.test_artifacts_http import auth, service

pytestmark = pytest.mark.integration

__all__ = ["service"]  # the fixture used here


async def _told(replica: Replica, tenant: str, ns: str, *, streaming: bool) -> list[Any]:
    http = httpx.AsyncClient(headers=auth(tenant), timeout=60)
    try:
        card = await A2ACardResolver(
            http, replica.root, "/a2a/drawer/.well-known/agent-card.json"
        ).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)
        request = SendMessageRequest(message=new_text_message(ns, role=Role.ROLE_USER))
        return [event async for event in client.send_message(request)]
    finally:
        await http.aclose()


def _files(artifacts: Any) -> list[tuple[str, str, str]]:
    """Each file artifact's (name, media type, URI)."""
    return [
        (part.filename, part.media_type, part.url)
        for artifact in artifacts
        for part in artifact.parts
        if part.url
    ]


def test_a_tasks_files_are_its_artifacts_each_downloaded_whole_with_the_key(service: Replica) -> None:
    # given: acme's task, whose call draws five files
    ns = f"a2a-{uuid.uuid4().hex[:8]}"

    # when: it is sent and answered
    [answered] = run(lambda: _told(service, "acme", ns, streaming=False))
    task = answered.task

    # then: the answer, then each file the call made, named and typed as the download sends it
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text.startswith("drawn: ")
    files = _files(task.artifacts)
    expected = made(ns)
    assert [name for name, _, _ in files] == [item.name for item in expected]
    assert [media for _, media, _ in files] == [
        "application/octet-stream",
        "text/markdown",
        "text/plain; charset=utf-8",
        "image/png",
        "application/octet-stream",  # a media type no header may carry, as the download sends it
    ]
    # and: each URI is this service's download, the bytes whole with acme's key, nothing to another's
    for (_, _, uri), item in zip(files, expected, strict=True):
        assert uri.startswith(f"{service.base_url}/artifacts/")
        response = httpx.get(uri, headers=auth("acme"), timeout=60)
        assert response.status_code == 200
        assert hashlib.sha256(response.content).hexdigest() == hashlib.sha256(item.data).hexdigest()
    assert httpx.get(files[2][2], headers=auth("globex"), timeout=30).status_code == 404


def test_a_streamed_task_tells_its_files_as_its_call_ends(service: Replica) -> None:
    ns = f"a2a-stream-{uuid.uuid4().hex[:8]}"

    events = run(lambda: _told(service, "acme", ns, streaming=True))

    updates = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    # the files as the call ends, then the answer
    assert [name for name, _, _ in _files(updates)] == [item.name for item in made(ns)]
    assert updates[-1].parts[0].text.startswith("drawn: ")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
