"""The fleet's tools as an MCP server (`toolfleet mcp serve`): any MCP client — an IDE, a desktop
assistant, another framework's agent — calls the live catalog's tools, each call a fleet call on its
pool (`FleetClient`): its deadline, its retries, its worker; nothing before it to undo.

- `tools/list` is the catalog's (or the named pools'): each tool's name, description and JSON schema
  as the model would see them. When pools start or stop serving tools, every connected client is sent
  `notifications/tools/list_changed` (the catalog is looked at every `WATCH_S`).
- `tools/call` runs the call and answers its result, or an error result (`isError`) with the tool's
  text. A client that sent a `progressToken` hears the tool's `ToolProgressReporter` reports as
  `notifications/progress` (progress out of 1 when the tool gives a fraction); a client's
  `notifications/cancelled` abandons the call on its worker, as `cancel_call` does. Each artifact a
  result holds is a resource link beside its text (`artifact:<id>`), which `resources/read` reads
  from the artifact store: text as text, anything else as base64 (up to `MAX_READ_BYTES`; a larger
  one is fetched from `GET /v1/artifacts/{id}` of `toolfleet serve`). A tenant reads only its own: another's
  is answered as one that does not exist.
- A tool that requires approval is asked about through the client (MCP elicitation: approve, reject,
  or approve edited arguments) when the client can be asked; otherwise the call waits in the journal
  like any approval (`paused_calls.py`), and is answered with a one-line error saying so, until a
  person decides and the client calls again.
- Over HTTP (streamable HTTP at `/mcp`), each request needs a bearer key of `TOOLFLEET_API_KEYS`
  when keys are configured, and the key's tenant is the call's (`tenant` invocation parameter).
  `/metrics` has the gateway's Prometheus metrics (its calls per tool, pool and outcome, their
  durations), as a replica's has.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.errors import UnknownFleetToolError
from orchestrator.integrations.fleet import FleetCall, FleetClient
from orchestrator.integrations.paused_calls import Approved, PausedCalls
from orchestrator.server.artifacts import readable_record
from orchestrator.server.tenants import OPERATOR, ApiKey, Viewer, matching_key
from orchestrator.telemetry.metrics import exposition
from workers.artifacts import Artifact, ArtifactRef, ArtifactSink, artifact_id_of, refs_in
from workers.errors import ArtifactNotFoundError
from workers.tools import ToolDefinition

__all__ = ["PATH", "WATCH_S", "FleetMcpServer"]

log = logging.getLogger(__name__)

PATH = "/mcp"
WATCH_S = 1.0  # how often the catalog is looked at for tools that came or went
NAME = "toolfleet"
TENANT_KEY = "toolfleet.tenant"  # where a request's tenant (from its key) is kept in the ASGI scope
MAX_READ_BYTES = 20 << 20  # the largest artifact `resources/read` answers (base64 in one message)
RESOURCE_NOT_FOUND = -32002  # MCP's code for a resource that does not exist
_APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "Run the call"},
        "arguments": {
            "type": "string",
            "title": "Arguments",
            "description": "The arguments to run it with, as JSON (empty: as asked)",
        },
    },
    "required": ["approve"],
}


class _Server(Server):
    """The low-level server, declaring `tools.listChanged` however it is run."""

    def create_initialization_options(
        self, notification_options: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, *args, **kwargs)


class FleetMcpServer:
    """An MCP server of `fleet`'s tools, run over stdio (`run_stdio`) or HTTP (`http_app`)."""

    def __init__(
        self, fleet: FleetClient, *, paused: PausedCalls | None = None, watch_s: float = WATCH_S
    ) -> None:
        self.fleet = fleet
        self.paused = paused  # where calls that require approval wait when a client cannot be asked
        self.watch_s = watch_s
        self.server = _Server(
            NAME,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_read_resource=self._read_resource,
        )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._initialized
        )
        self._sessions: dict[int, Any] = {}  # the connected clients, told when the tools change

    # -- the protocol -------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        definitions = await asyncio.to_thread(self.fleet.tools)
        return types.ListToolsResult(tools=[_tool(d) for d in definitions])

    async def _call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        try:
            definition = await asyncio.to_thread(self.fleet.tool, name)
        except UnknownFleetToolError as exc:
            return _error(str(exc))
        except Exception as exc:  # the catalog unreadable: Redis away
            return _error(f"the fleet's catalog cannot be read: {exc}")
        tenant = _tenant(ctx)
        approved: Approved | None = None
        if definition.requires_approval:
            if _can_ask(ctx):
                decided: dict[str, Any] | Approved | str = await _asked(ctx, definition, arguments)
            elif self.paused is not None:
                decided = await self.paused.approved(definition, arguments, tenant)
            else:
                decided = f"tool {name!r} requires approval, and this client cannot be asked for it"
            if isinstance(decided, str):
                return _error(decided)
            approved = decided if isinstance(decided, Approved) else None
            arguments = decided.arguments if isinstance(decided, Approved) else decided
        call = None
        try:
            call = await _called(ctx, self.fleet, definition, arguments, tenant)
        finally:
            if approved is not None:  # journaled however it ended (a cancel: failed)
                with anyio.CancelScope(shield=True):
                    await approved.ended(call)
        content: list[Any] = [types.TextContent(type="text", text=call.text)]
        if not call.is_error:  # each artifact the result holds, as a link to it beside the text
            content += [_link(ref) for ref in refs_in(call.outcome.result_object, text=call.text)]
        return types.CallToolResult(content=content, is_error=call.is_error)

    async def _read_resource(
        self, ctx: ServerRequestContext, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        """An artifact of a result (its link's `artifact:<id>`), read from the store."""
        uri = str(params.uri)
        artifact_id = artifact_id_of(uri)
        if artifact_id is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"no resource {uri!r}: this server's are artifact:<id>")
        tenant = _tenant(ctx)
        viewer = OPERATOR if tenant is None else Viewer(tenant)  # stdio: the operator's own
        store = ArtifactSink.from_env().store
        record = await readable_record(store, artifact_id, viewer)
        if record is None:  # another tenant's as one that does not exist
            raise MCPError(RESOURCE_NOT_FOUND, str(ArtifactNotFoundError.missing(artifact_id)))
        ref = record.ref
        if ref.size > MAX_READ_BYTES:
            raise MCPError(
                types.INVALID_PARAMS,
                f"{ref.ref} is {ref.size} bytes, over the {MAX_READ_BYTES} this server reads: "
                f"fetch it from GET /v1/artifacts/{ref.id} of toolfleet serve",
            )
        try:
            data = await asyncio.to_thread(Artifact.stored(ref, store).read_bytes)
        except (ArtifactNotFoundError, OSError) as exc:
            raise MCPError(RESOURCE_NOT_FOUND, str(exc)) from None
        return types.ReadResourceResult(contents=[_contents(uri, ref, data)])

    async def _initialized(self, ctx: ServerRequestContext, params: Any) -> None:
        connection = getattr(ctx.session, "_connection", None)  # the SDK keeps no public handle
        if connection is None:
            return
        self._sessions[id(connection)] = ctx.session
        connection.exit_stack.callback(self._sessions.pop, id(connection), None)

    async def watch(self) -> None:
        """Tell every connected client when the catalog's tools change (until cancelled)."""
        known: set[str] | None = None
        while True:
            try:
                names = {d.name for d in await asyncio.to_thread(self.fleet.tools)}
            except Exception as exc:  # Redis away: looked at again
                log.debug("catalog unreadable: %s", exc)
                names = known or set()
            if known is not None and names != known:
                log.info("the fleet's tools changed: telling %d clients", len(self._sessions))
                for session in list(self._sessions.values()):
                    with contextlib.suppress(Exception):  # a client gone meanwhile
                        await session.send_tool_list_changed()
            known = names
            await asyncio.sleep(self.watch_s)

    # -- transports ---------------------------------------------------------------------------------

    async def run_stdio(self) -> None:
        """Serve one client on this process' stdin and stdout until it leaves."""
        watching = asyncio.create_task(self.watch())
        try:
            async with stdio_server() as (read, write):
                await self.server.run(read, write, self.server.create_initialization_options())
        finally:
            watching.cancel()

    def http_app(self, keys: Sequence[ApiKey] = ()) -> ASGIApp:
        """Streamable HTTP at `PATH`, behind bearer `keys` when there are any."""
        manager = StreamableHTTPSessionManager(app=self.server)

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with manager.run():
                watching = asyncio.create_task(self.watch())
                try:
                    yield
                finally:
                    watching.cancel()

        async def metrics(request: Request) -> Response:
            body, content_type = exposition()
            return Response(body, media_type=content_type)

        routes = [Route(PATH, endpoint=StreamableHTTPASGIApp(manager)), Route("/metrics", endpoint=metrics)]
        app = Starlette(routes=routes, lifespan=lifespan)
        return _BearerKeys(app, tuple(keys))


class _BearerKeys:
    """Requests to `PATH` need one of `keys` (none configured: anyone); the key's tenant is kept.
    `/metrics` is open, as a replica's is: it is scraped from inside the network."""

    def __init__(self, app: ASGIApp, keys: tuple[ApiKey, ...]) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.keys and scope.get("path") == PATH:
            presented = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            scheme, _, token = presented.partition(" ")
            key = matching_key(self.keys, token.strip()) if scheme.lower() == "bearer" else None
            if key is None:
                body = {"error": {"message": "a valid bearer key is required (Authorization: Bearer KEY)"}}
                await JSONResponse(body, 401, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
            scope.setdefault("state", {})[TENANT_KEY] = key.tenant
        await self.app(scope, receive, send)


def _tool(definition: ToolDefinition) -> types.Tool:
    spec = definition.specification
    schema = spec.parameters or {"type": "object", "properties": {}}
    annotations = types.ToolAnnotations(idempotent_hint=bool(definition.options.idempotent))
    return types.Tool(
        name=spec.name, description=spec.description, input_schema=schema, annotations=annotations
    )


def _link(ref: ArtifactRef) -> types.ResourceLink:
    """An artifact as MCP's resource link: `artifact:<id>` (`resources/read` reads it), its name,
    media type and size."""
    return types.ResourceLink(
        type="resource_link",
        uri=ref.ref,
        name=ref.name,
        mime_type=ref.media_type,
        size=ref.size,
        description=f"{ref.ref} (SHA-256 {ref.sha256}, in the store at {ref.uri})",
    )


def _contents(
    uri: str, ref: ArtifactRef, data: bytes
) -> types.TextResourceContents | types.BlobResourceContents:
    """An artifact's bytes as MCP resource contents: text when it is text (and decodes), else base64."""
    if ref.is_text:
        with contextlib.suppress(UnicodeDecodeError):
            return types.TextResourceContents(uri=uri, mime_type=ref.media_type, text=data.decode("utf-8"))
    blob = base64.b64encode(data).decode("ascii")
    return types.BlobResourceContents(uri=uri, mime_type=ref.media_type, blob=blob)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _tenant(ctx: ServerRequestContext) -> str | None:
    request = getattr(ctx, "request", None)
    state = getattr(request, "scope", {}).get("state") if request is not None else None
    return state.get(TENANT_KEY) if isinstance(state, dict) else None


async def _called(
    ctx: ServerRequestContext,
    fleet: FleetClient,
    definition: ToolDefinition,
    arguments: dict[str, Any],
    tenant: str | None,
) -> FleetCall:
    """The fleet call, its progress sent to the client as `notifications/progress` (out of 1 when the
    tool gives a fraction, growing only) when the client asked for progress."""
    if (ctx.meta or {}).get("progress_token") is None:
        return await fleet.call(definition.name, arguments, tenant=tenant, definition=definition)
    sent, call = 0.0, None
    async for told in fleet.stream(definition.name, arguments, tenant=tenant, definition=definition):
        if isinstance(told, FleetCall):
            call = told
            continue
        sent = max(sent, told.fraction if told.fraction is not None else float(told.seq))
        total = 1.0 if told.fraction is not None else None
        with contextlib.suppress(Exception):  # a client gone: the call goes on
            await ctx.session.report_progress(sent, total, told.message)
    assert call is not None  # a stream ends with its call
    return call


def _can_ask(ctx: ServerRequestContext) -> bool:
    """Whether the client can be asked for a decision (MCP elicitation, with a way back to it)."""
    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    return bool(ctx.session.check_client_capability(wanted) and ctx.session.can_send_request)


async def _asked(
    ctx: ServerRequestContext, definition: ToolDefinition, arguments: dict[str, Any]
) -> dict[str, Any] | str:
    """The arguments a person approved the call with, asked through the client; else why not."""
    name = definition.name
    shown = json.dumps(arguments, ensure_ascii=False)
    try:
        answer = await ctx.session.elicit_form(
            f"Approve the call of {name} with {shown}?", _APPROVAL_SCHEMA, related_request_id=ctx.request_id
        )
    except Exception as exc:
        return f"tool {name!r} requires approval, and asking for it failed: {exc}"
    content = answer.content or {}
    if answer.action != "accept" or content.get("approve") is not True:
        return f"the call of {name!r} was not approved ({answer.action})"
    edited = str(content.get("arguments") or "").strip()
    if not edited:
        return arguments
    try:
        changed = json.loads(edited)
    except ValueError as exc:
        return f"the approved arguments of {name!r} are not JSON: {exc}"
    if not isinstance(changed, dict):
        return f"the approved arguments of {name!r} are not a JSON object"
    return changed
