"""`toolfleet mcp serve` over streamable HTTP, driven by the official MCP client: the pools' tools listed
as the catalog has them, each call run on a worker, progress heard, a cancel stopping the call on its
worker, approvals asked through the client, keys required, and clients told when tools come and go."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests._cli import on_journal
from tests._waiting import wait_for
from tests.integration.mcp_gateway import tools
from tests.integration.mcp_gateway.conftest import KEY, MODULE, OTHER_KEY, Gateway
from tests.integration.side_effects import process_client
from tests.integration.worker_processes import tool_worker
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


@contextlib.asynccontextmanager
async def session(
    gateway: Gateway,
    *,
    key: str = KEY,
    elicit: Elicit | None = None,
    heard: list[object] | None = None,
) -> AsyncIterator[ClientSession]:
    async def on_message(message: object) -> None:
        if heard is not None:
            heard.append(message)

    options: dict[str, Any] = {"message_handler": on_message}
    if elicit is not None:
        options["elicitation_callback"] = elicit
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(gateway.url, http_client=http) as (read, write),
        ClientSession(read, write, **options) as client,
    ):
        await client.initialize()
        yield client


def run(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(scenario())


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def test_the_pools_tools_are_listed_as_the_catalog_has_them(gateway: Gateway) -> None:
    async def scenario() -> list[types.Tool]:
        async with session(gateway) as client:
            return (await client.list_tools()).tools

    listed = {tool.name: tool for tool in run(scenario)}

    assert sorted(listed) == ["add", "export", "refuse", "walk", "whose", "wire"]  # not the other pool's
    add = listed["add"]
    assert add.description == "Adds two numbers"
    assert add.input_schema["properties"]["a"]["type"] == "integer"
    assert sorted(add.input_schema["required"]) == ["a", "b"]


def test_a_call_runs_on_a_worker_of_its_pool_and_a_failure_is_an_error_result(
    gateway: Gateway, gateway_worker: WorkerProcess
) -> None:
    async def scenario() -> tuple[types.CallToolResult, ...]:
        async with session(gateway) as client:
            return (
                await client.call_tool("add", {"a": 2, "b": 3}),
                await client.call_tool("refuse", {"reason": "no"}),
                await client.call_tool("add", {"a": "two", "b": 3}),
                await client.call_tool("elsewhere", {}),
                await client.call_tool("whose", {"tenant": "globex"}),
            )

    added, refused, wrong, unknown, whose = run(scenario)

    assert (_text(added), added.is_error) == (f"5 (on {gateway_worker.pid})", False)
    assert refused.is_error and "refused: no" in _text(refused)
    assert (wrong.is_error, _text(wrong)) == (True, 'Argument "a" is not convertable to int, got str: <two>')
    assert unknown.is_error
    assert (
        _text(unknown) == "no live worker of the pools gateway, gateway-late serves a tool named 'elsewhere'"
    )
    assert _text(whose) == "tenant acme"  # the key's, whatever the arguments say


def test_an_artifact_is_a_resource_link_beside_the_text_the_model_reads(gateway: Gateway) -> None:
    async def scenario() -> types.CallToolResult:
        async with session(gateway) as client:
            return await client.call_tool("export", {"rows": 3})

    result = run(scenario)

    assert not result.is_error
    text, link = result.content
    assert isinstance(text, types.TextContent) and text.text.startswith(
        "0,0\n1,1\n2,4\n\n[artifact squares.csv"
    )
    assert isinstance(link, types.ResourceLink)
    assert (link.name, link.mime_type, link.size) == ("squares.csv", "text/csv", 12)
    reference = re.search(r"artifact:[0-9a-f]{32}", text.text)
    assert (
        reference is not None and link.description is not None and link.description.startswith(reference[0])
    )
    assert str(link.uri) == reference[0]


def test_an_artifacts_link_is_read_by_its_tenant_alone(gateway: Gateway) -> None:
    # given: acme's call made an artifact, linked from its result
    async def made() -> str:
        async with session(gateway) as client:
            result = await client.call_tool("export", {"rows": 4})
        [link] = [c for c in result.content if isinstance(c, types.ResourceLink)]
        return str(link.uri)

    uri = run(made)

    async def read(key: str, target: str) -> types.ReadResourceResult | MCPError:
        async with session(gateway, key=key) as client:
            try:
                return await client.read_resource(target)
            except MCPError as exc:
                return exc

    # when: acme reads it, globex reads it, and acme reads what nobody made
    mine = run(lambda: read(KEY, uri))
    theirs = run(lambda: read(OTHER_KEY, uri))
    nobodys = run(lambda: read(KEY, "artifact:" + "0" * 32))

    # then: acme gets its text; to globex it does not exist, as an artifact nobody made
    assert isinstance(mine, types.ReadResourceResult)
    [contents] = mine.contents
    assert isinstance(contents, types.TextResourceContents)
    assert (contents.text, contents.mime_type) == ("0,0\n1,1\n2,4\n3,9\n", "text/csv")
    assert isinstance(theirs, MCPError) and isinstance(nobodys, MCPError)
    assert theirs.code == nobodys.code == -32002
    assert theirs.message == f"artifact {uri.removeprefix('artifact:')} does not exist (or was removed)"


def test_progress_reports_reach_a_client_that_asked_for_them(gateway: Gateway) -> None:
    ns = uuid.uuid4().hex[:8]
    heard: list[tuple[float, float | None, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async def scenario() -> types.CallToolResult:
        async with session(gateway) as client:
            arguments: dict[str, Any] = {"ns": ns, "steps": 5}
            return await client.call_tool("walk", arguments, progress_callback=progress)

    result = run(scenario)

    assert (_text(result), result.is_error) == ("walked 5 steps", False)
    assert heard, "no progress heard"
    assert [done for done, _, _ in heard] == sorted(done for done, _, _ in heard)
    assert heard[-1] == (1.0, 1.0, "step 5 of 5")


def test_a_client_cancelling_its_call_stops_it_on_its_worker(gateway: Gateway) -> None:
    ns = uuid.uuid4().hex[:8]
    redis = process_client()

    async def scenario() -> None:
        async with session(gateway) as client:
            with anyio.move_on_after(1.5):  # the client gives up: notifications/cancelled
                await client.call_tool("walk", {"ns": ns, "steps": 300})

    run(scenario)

    wait_for(lambda: redis.get(f"gateway:{ns}:stopped"), timeout_s=10, what="the walk stopped on its worker")
    steps = int(redis.get(f"gateway:{ns}:steps") or 0)
    assert 0 < steps < 100
    time.sleep(1.0)  # ten more steps, had it gone on
    assert int(redis.get(f"gateway:{ns}:steps") or 0) == steps  # it walks no more


def _approver(decision: dict[str, Any], asked: list[str]) -> Elicit:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action="accept", content=decision)

    return elicit


def test_a_tool_that_requires_approval_is_asked_about_through_the_client(gateway: Gateway) -> None:
    ns = uuid.uuid4().hex[:8]
    redis = process_client()
    asked: list[str] = []

    async def call(decision: dict[str, Any], amount: int) -> types.CallToolResult:
        async with session(gateway, elicit=_approver(decision, asked)) as client:
            return await client.call_tool("wire", {"ns": ns, "amount": amount})

    rejected = run(lambda: call({"approve": False}, 100))
    edited = run(lambda: call({"approve": True, "arguments": f'{{"ns": "{ns}", "amount": 7}}'}, 100))
    approved = run(lambda: call({"approve": True}, 5))

    assert rejected.is_error and _text(rejected) == "the call of 'wire' was not approved (accept)"
    assert (_text(edited), _text(approved)) == ("wired 7", "wired 5")
    assert int(redis.get(f"gateway:{ns}:wired") or 0) == 12  # the rejected wire never ran
    assert asked[0] == f'Approve the call of wire with {{"ns": "{ns}", "amount": 100}}?'


def test_a_call_a_client_cannot_be_asked_about_waits_in_the_journal_until_approved(
    gateway: Gateway, tmp_path: Path
) -> None:
    ns = uuid.uuid4().hex[:8]
    redis = process_client()

    async def wire(amount: int) -> str:
        async with session(gateway) as client:  # no elicitation capability
            result = await client.call_tool("wire", {"ns": ns, "amount": amount})
            return ("error: " if result.is_error else "") + _text(result)

    # given: a client that cannot be asked calls a tool that requires approval
    first = run(lambda: wire(100))
    again = run(lambda: wire(100))
    invocation_id, call_id = re.findall(r"call (\S+) of invocation (\S+)", first)[0][::-1]

    # when: an operator approves it with other arguments, and rejects another call
    approving = on_journal(
        gateway.database_url,
        "approve",
        invocation_id,
        call_id,
        "--arguments",
        f'{{"ns": "{ns}", "amount": 60}}',
        cwd=tmp_path,
    )
    run(lambda: wire(5))
    listed = on_journal(gateway.database_url, "approvals", "--json", cwd=tmp_path).stdout.splitlines()
    [waiting] = [json.loads(line) for line in listed]
    rejecting = on_journal(
        gateway.database_url,
        "reject",
        waiting["invocation_id"],
        waiting["call_id"],
        "--reason",
        "too small",
        cwd=tmp_path,
    )

    # then: the call waited, ran once approved (as approved), once only; the rejected one never ran
    assert first.startswith("error: tool 'wire' requires approval: the call waits as call ")
    assert (
        again == f"error: tool 'wire' still waits for approval (call {call_id} of invocation {invocation_id})"
    )
    assert approving.returncode == 0 and rejecting.returncode == 0, approving.stderr + rejecting.stderr

    async def twice() -> list[str]:  # two requests at once: one runs it
        return list(await asyncio.gather(wire(100), wire(100)))

    assert sorted(run(twice))[-1] == "wired 60"
    assert run(lambda: wire(100)).startswith("error: tool 'wire' ")  # not run again: it waits anew
    told = run(lambda: wire(5))
    assert told.startswith("error: the call of 'wire' was not approved (rejected: too small; call ")
    assert int(redis.get(f"gateway:{ns}:wired") or 0) == 60


def test_a_request_without_a_valid_key_is_refused(gateway: Gateway) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}):
        response = httpx.post(gateway.url, json={}, headers=headers, timeout=5)
        assert response.status_code == 401, headers
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_clients_are_told_when_a_pool_starts_and_stops_serving_tools(
    gateway: Gateway, redis_url: str, tmp_path: Path
) -> None:
    heard: list[object] = []

    def changes() -> int:
        return sum(isinstance(m, types.ToolListChangedNotification) for m in heard)

    async def told(count: int) -> None:
        for _ in range(150):  # up to 15 s: a stopped worker leaves the catalog once its beat expires
            if changes() >= count:
                return
            await asyncio.sleep(0.1)

    async def scenario() -> list[str]:
        async with session(gateway, heard=heard) as client:
            listed = [",".join(t.name for t in (await client.list_tools()).tools)]
            worker = tool_worker(redis_url, [tools.LATE_POOL], [MODULE], tmp_path / "late.log", "late@test")
            try:
                await asyncio.to_thread(worker.wait_ready, 60)
                await told(1)
                listed.append(",".join(t.name for t in (await client.list_tools()).tools))
            finally:
                await asyncio.to_thread(worker.stop)
            await told(2)
            listed.append(",".join(t.name for t in (await client.list_tools()).tools))
            return listed

    listed = run(scenario)

    assert changes() == 2
    assert listed == [
        "add,export,refuse,walk,whose,wire",
        "add,export,late,refuse,walk,whose,wire",
        "add,export,refuse,walk,whose,wire",
    ]
