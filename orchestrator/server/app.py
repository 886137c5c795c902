"""The HTTP service of `toolfleet serve`: FastAPI routes over the agents, in OpenAI's shape.

Every replica is alike and keeps nothing an invocation needs beyond its run: conversations are in
SQL, tool calls on the worker pools. A replica admits at most `max_invocations` at once (429 beyond),
reads a body up to `max_body_bytes` (413 beyond), refuses (400) a JSON body holding `NaN` or an
infinity, and asks for a bearer key when keys are configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.errors import ApiError, NonFiniteNumberError
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.finite_json import loads_finite, nul_at
from orchestrator.loop.cancellation import listen_for_cancels
from orchestrator.memory import SqlChatMemoryStore
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import Journal
from orchestrator.saga.recovery import stale_after_floor
from orchestrator.server import a2a, approvals, artifacts, completions, native, routes
from orchestrator.server.adoption import adopt_in_background
from orchestrator.server.error_shape import api_error_body, error_body
from orchestrator.server.events import EventLog, service_redis
from orchestrator.server.invocations import Invocations
from orchestrator.server.replicas import ReplicaWatch
from orchestrator.server.settings import ServeSettings
from orchestrator.server.state import ServiceState
from orchestrator.server.tenants import OPERATOR, ApiKey, matching_key
from orchestrator.server.ui import UiSettings, mount_ui
from orchestrator.server.unended import tell_unended
from orchestrator.server.visibility import VIEWER_SCOPE_KEY
from orchestrator.service import AiService
from orchestrator.telemetry.metrics import watch_approvals
from orchestrator.telemetry.queues import watch_queues
from workers.settings import Settings

__all__ = ["create_app"]

log = logging.getLogger(__name__)

# How long, in heartbeat TTLs, a dead replica's invocation whose agent this replica does not serve is
# left for one that does (the replicas take turns looking), before it is undone here.
LEAVE_FOR_OTHERS_TTLS = 5


def create_app(
    agents: Mapping[str, AiService], serve: ServeSettings, settings: Settings, ui: UiSettings | None = None
) -> FastAPI:
    """The service's application, serving `agents` by name, with the run view at `/ui` (`ui`: its
    basic authentication and Flower's address; the view's keys are the service's)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = service_redis(settings.redis_url)
        events = EventLog(client)
        recovery_executor = functools.cache(lambda: CeleryExecutor(settings=settings))
        memory_store = SqlChatMemoryStore(settings.database_url)
        journal = AsyncJournal(settings.database_url, keys=settings.journal_keys)
        state = ServiceState(
            agents=agents,
            serve=serve,
            settings=settings,
            memory_store=memory_store,
            journal=journal,
            redis=client,
            events=events,
            invocations=Invocations(client, events, journal),
        )
        app.state.toolfleet = state
        watch = ReplicaWatch(
            client,
            state.journal,
            recovery_executor,
            events,
            settings.heartbeat_ttl_s,
            stale_after_s=stale_after_floor(settings),
        )
        watch.housekeeping = lambda: approvals.resume_decided(state)
        watch.adopt = lambda invocation_id, dead: adopt_in_background(
            state, invocation_id, dead, watch.stale_after_s
        )
        watch.tell_unended = lambda owner: tell_unended(state, owner)
        watch.leave_for_others_s = LEAVE_FOR_OTHERS_TTLS * settings.heartbeat_ttl_s
        # an invocation of this replica's own, silent longer than a turn may wait to begin, is lost here
        watch.orphaned_after_s = watch.stale_after_s + serve.turn_wait_s + settings.heartbeat_ttl_s
        watch.running_here = lambda: list(state.invocations.running)
        listen_for_cancels(settings.redis_url)  # whatever executor the agents use
        background = [asyncio.create_task(watch.run())]
        stop_counting_approvals = watch_approvals(
            lambda: Journal(settings.database_url, keys=settings.journal_keys)
        )
        stop_reading_queues = watch_queues(settings)  # the pools' autoscaling signals, on /metrics
        try:
            yield
        finally:
            await state.invocations.drain(0 if state.draining else serve.drain_grace_s)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            with contextlib.suppress(Exception):
                await watch.stop()
            if recovery_executor.cache_info().currsize:
                recovery_executor().close()
            stop_counting_approvals()
            await asyncio.to_thread(stop_reading_queues)
            await state.journal.dispose()
            await memory_store.adispose()
            await client.aclose()

    app = FastAPI(
        title="toolfleet",
        summary="LLM agents whose tool calls run on worker pools, spoken to as OpenAI's chat completions",
        lifespan=lifespan,
    )
    _install_error_handlers(app)
    app.add_middleware(_FiniteJson)  # inside `_BearerKeys`: no body is read before its key is checked
    app.add_middleware(_BearerKeys)
    app.include_router(routes.router)
    app.include_router(completions.router)
    app.include_router(native.router)
    app.include_router(approvals.router)
    app.include_router(a2a.router)
    artifacts.install(app, settings)
    mount_ui(app, ui or UiSettings())
    return app


# /metrics is scraped per replica from inside the network (the balancer does not pass it on).
_OPEN_PATHS = frozenset(
    {"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect"}
)


class _BearerKeys:
    """Ask for `Authorization: Bearer <key>` on every route but health, metrics and the schema, when keys are
    configured; each configured key is compared in constant time. The request's `Viewer` (its key's
    tenant and scopes; with no keys, an operator of the default tenant) goes on its scope. A plain
    ASGI middleware: it never buffers a response, so streams flow as they are written."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http":
            scope[VIEWER_SCOPE_KEY] = None  # never one a caller put there
            keys: tuple[ApiKey, ...] = scope["app"].state.toolfleet.serve.api_keys
            if not keys:
                scope[VIEWER_SCOPE_KEY] = OPERATOR
            elif path not in _OPEN_PATHS and not _run_view(path) and not path.endswith(a2a.CARD_PATH):
                key = _key_of(keys, Headers(scope=scope).get("authorization", ""))
                if isinstance(key, ApiError):
                    await _error(key)(scope, receive, send)
                    return
                scope[VIEWER_SCOPE_KEY] = key.viewer
        await self.app(scope, receive, send)


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class _FiniteJson:
    """Refuse (400, naming where: `parameters.limit`) a request whose body is JSON holding `NaN`,
    `Infinity`, `-Infinity` or too large a number, on every route, before any reads it: Python's
    parser takes them, and they would be journaled as text no JSON reader accepts. So is a string
    holding NUL (`\\u0000`): PostgreSQL's text columns refuse it, and the invocation would fail as
    it is journaled. The body is read
    up to the replica's limit and handed on as it came; one over the limit, or that is not JSON, is
    left to the route, which says what is wrong with it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        limit: int = scope["app"].state.toolfleet.serve.max_body_bytes
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        chunks: list[bytes] = []
        size, whole = 0, False
        while size <= limit:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if not message.get("more_body", False):
                whole = size <= limit
                break
        if whole and size:
            body = b"".join(chunks)
            refusal = None
            try:
                value = loads_finite(body)
            except NonFiniteNumberError as exc:
                refusal = ApiError(400, f"invalid request: {exc}", param=exc.location)
            except (ValueError, RecursionError):
                pass  # not JSON: the route refuses it in its own words
            else:
                if b"\\u0000" in body and (where := nul_at(value)) is not None:
                    said = f"{where}: " if where else ""
                    refusal = ApiError(
                        400,
                        f"invalid request: {said}a string holding NUL (\\u0000): the journal cannot store it",
                        param=where or None,
                    )
            if refusal is not None:
                await _error(refusal)(scope, receive, send)
                return

        async def replay() -> Message:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)


def _run_view(path: str) -> bool:
    """The run view asks for the same keys its own way (a browser sends no bearer header)."""
    return path == "/ui" or path.startswith("/ui/")


def _key_of(keys: tuple[ApiKey, ...], authorization: str) -> ApiKey | ApiError:
    """The configured key the header presents, or the 401 to answer."""
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return ApiError(401, "missing API key: send the header 'Authorization: Bearer <key>'")
    matched = matching_key(keys, given.strip())
    return ApiError(401, "incorrect API key") if matched is None else matched


def _error(error: ApiError) -> JSONResponse:
    return JSONResponse(api_error_body(error), status_code=error.status, headers=error.headers)


REDIS_AWAY = ApiError(
    503,
    "the service's Redis cannot be reached just now: send the request again",
    code="service_unavailable",
    headers={"Retry-After": "1"},
)


def _install_error_handlers(app: FastAPI) -> None:
    async def api_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _error(exc)

    async def invalid(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(p) for p in first["loc"] if p != "body") or None
        return _error(ApiError(400, f"invalid request: {param}: {first['msg']}", param=param))

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code)

    async def redis_away(request: Request, exc: Exception) -> Response:
        # a Redis restarting, or out of reach: the request is worth sending again, to any replica
        method, path = request.method, request.url.path
        log.warning("%s %s: Redis cannot be reached (%s): answered 503", method, path, exc)
        return _error(REDIS_AWAY)

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            error_body(500, "the service failed to answer this request; its log has the details"),
            status_code=500,
        )

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RedisConnectionError, redis_away)
    app.add_exception_handler(RedisTimeoutError, redis_away)
    app.add_exception_handler(Exception, unexpected)
