"""The run view's routes: the invocations, one invocation (live), its artifacts' bytes, the pools,
and signing in.

Every page asks who is looking first (`guarded`): the service's keys through the sign-in form, or
HTTP basic authentication, or no one when the view is open (loopback only). Every POST carries the
session's form token (`acted`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from redis.exceptions import RedisError

from orchestrator.server.events import once_journaled, stream_position
from orchestrator.server.ui import data
from orchestrator.server.ui.artifacts import artifact_views, served
from orchestrator.server.ui.auth import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    SESSION_TTL_S,
    Session,
    basic_refusal,
    form_fields,
    issue_session,
    key_session,
    session_of,
    set_cookie,
    sign_out,
    signed_out,
    signers_of,
    valid_login_nonce,
)
from orchestrator.server.ui.context import UiContext, ui_context
from orchestrator.server.ui.live import live_steps, placed
from orchestrator.server.ui.render import html, static_file
from orchestrator.server.ui.waterfall import waterfall_svg
from orchestrator.server.visibility import sees_invocation

__all__ = ["Page", "acted", "common", "guarded", "router", "uuid_or_none"]

router = APIRouter(prefix="/ui", include_in_schema=False)


Page = Callable[[Request, UiContext, Session], Awaitable[Response]]
Action = Callable[[Request, UiContext, Session, dict[str, str]], Awaitable[Response]]


async def guarded(request: Request, page: Page) -> Response:
    """`page` for a viewer the view lets in; else the sign-in form (keys) or a 401 (basic)."""
    context = ui_context(request)
    ui = context.ui
    if ui.basic_auth and (refusal := basic_refusal(ui, request)) is not None:
        return refusal
    session = session_of(ui, request)
    keyed = bool(ui.api_keys) and not ui.basic_auth  # signed in with a key: it may have signed out
    if session is not None and keyed:
        try:
            if await signed_out(context.events.client, session):
                session = None
        except (RedisError, OSError):  # an ended session must not come back while Redis is away
            return html(
                "message.html",
                status_code=503,
                title="Cannot check the sign-in",
                message="The view cannot reach Redis to check this sign-in: try again shortly.",
                **common(context, None),
            )
    fresh = session is None
    if session is None:
        if keyed:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303)
        session = issue_session(*signers_of(ui)[0])  # what the forms' tokens are tied to
    response = await page(request, context, session)
    if fresh:
        set_cookie(response, request, SESSION_COOKIE, session.cookie, SESSION_TTL_S)
    return response


async def acted(request: Request, action: Action) -> Response:
    """`action` for a signed-in viewer whose form carries the session's token; 403 otherwise."""

    async def checked(request: Request, context: UiContext, session: Session) -> Response:
        fields = await form_fields(request)
        if request.cookies.get(SESSION_COOKIE) != session.cookie or fields is None:
            return _forbidden(context, session)
        if not session.accepts(fields.get("csrf")):
            return _forbidden(context, session)
        return await action(request, context, session, fields)

    return await guarded(request, checked)


def _forbidden(context: UiContext, session: Session) -> Response:
    return html(
        "message.html",
        status_code=403,
        title="Refused",
        message="This form was not sent from this page (its token is missing or stale): reload, try again.",
        **common(context, session),
    )


def common(context: UiContext, session: Session | None) -> dict[str, Any]:
    return {
        "csrf": session.csrf_token if session else "",
        "signed_in": bool(session and context.ui.api_keys and not context.ui.basic_auth),
        "flower": context.ui.flower_url,
    }


# -- pages ------------------------------------------------------------------------------------------


@router.get("")
async def invocations_page(request: Request) -> Response:
    return await guarded(request, _invocations)


@router.get("/rows")
async def invocation_rows(request: Request) -> Response:
    return await guarded(request, _invocations)


async def _invocations(request: Request, context: UiContext, session: Session) -> Response:
    query = request.query_params
    chosen = data.RunFilter(
        agent=_printable(query.get("agent", "")),
        state=query.get("state", "") if query.get("state", "") in data.STATES else "",
        since=query.get("since", "all") if query.get("since", "all") in data.SINCE else "all",
        search=_printable(query.get("q", "")).strip()[: data.SEARCH_CHARS],
    )
    only = session.viewer.only  # a tenant's rows only, in SQL; an operator's: every tenant's
    rows, agents = await context.journal.run(
        lambda journal: (data.run_rows(journal, chosen, only), data.agent_names(journal, only))
    )
    active = any(row.state in data.ACTIVE for row in rows)
    template = "_rows.html" if request.url.path.endswith("/rows") else "invocations.html"
    return html(
        template,
        rows=rows,
        agents=agents,
        chosen=chosen,
        states=data.STATES,
        since_choices=list(data.SINCE),
        active=active,
        query=request.url.query,
        **common(context, session),
    )


@router.get("/invocations/{invocation_id}")
async def invocation_page(invocation_id: str, request: Request) -> Response:
    return await guarded(request, lambda r, c, s: _invocation(r, c, s, invocation_id, "invocation.html"))


@router.get("/invocations/{invocation_id}/timeline")
async def invocation_timeline(invocation_id: str, request: Request) -> Response:
    return await guarded(request, lambda r, c, s: _invocation(r, c, s, invocation_id, "_timeline.html"))


async def _invocation(
    request: Request, context: UiContext, session: Session, invocation_id: str, template: str
) -> Response:
    checked = uuid_or_none(invocation_id)
    # the stream's position is read before the journal: an event that lands between the two reads is
    # sent to the page again (a refresh too many), never skipped (a call the page would not show)
    after = "0"
    if checked is not None and template == "invocation.html":
        after = await context.events.last_id(checked)
    story = None if checked is None else await _story_of(context, checked)
    if story is None or not session.viewer.sees(story.record.tenant):  # another tenant's: unknown
        return html(
            "message.html",
            status_code=404,
            title="No such invocation",
            message=f"The journal has no invocation {invocation_id}.",
            **common(context, session),
        )
    if any(c.state == "abandoned" and c.compensable for c in story.calls):
        story.late = await asyncio.to_thread(data.late_compensations, context.redis, story.calls)
    if any(c.state == "dispatched" for c in story.calls):  # where each stands, between its journal writes
        story.live = await live_steps(context.events, story.record.id)
        story.turns = [data.TurnView(turn.turn, placed(turn.calls, story.live)) for turn in story.turns]
    return html(
        template,
        after=after,
        story=story,
        waterfall=waterfall_svg(story, datetime.now(UTC)),
        record=story.record,
        artifacts=await artifact_views(context, session.viewer, story.calls),
        active=story.record.state in data.ACTIVE,
        **common(context, session),
    )


@router.get("/invocations/{invocation_id}/events")
async def invocation_events(invocation_id: str, request: Request) -> Response:
    """The invocation's event stream for the page's script (the native API's, behind the view's auth)."""

    async def stream(request: Request, context: UiContext, session: Session) -> Response:
        checked = uuid_or_none(invocation_id)
        if (
            checked is None
            or not await context.events.exists(checked)
            or not await sees_invocation(session.viewer, context.events, context.journal, checked)
        ):
            return Response("no events", status_code=404, media_type="text/plain")
        after = stream_position(
            request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        )
        if after is None:
            return Response("not an event id", status_code=400, media_type="text/plain")

        return StreamingResponse(
            context.events.follow(checked, after),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store"},
        )

    return await guarded(request, stream)


@router.api_route("/artifacts/{artifact_id}", methods=["GET", "HEAD"])
async def artifact(artifact_id: str, request: Request) -> Response:
    """An artifact's bytes, for its link and picture on its invocation's page (the tenant's own only)."""

    async def page(request: Request, context: UiContext, session: Session) -> Response:
        response = await served(request, context, session.viewer, artifact_id)
        if response is not None:
            return response
        return html(
            "message.html",
            status_code=404,
            title="No such artifact",
            message=f"The artifact store has no artifact {artifact_id} (or it was removed).",
            **common(context, session),
        )

    return await guarded(request, page)


@router.get("/pools")
async def pools_page(request: Request) -> Response:
    return await guarded(request, _pools)


async def _pools(request: Request, context: UiContext, session: Session) -> Response:
    workers, beats = await asyncio.to_thread(data.catalog_pools, context.redis)
    only = session.viewer.only
    in_flight = await context.journal.run(lambda journal: data.calls_in_flight(journal, only))
    return html(
        "pools.html",
        pools=data.pool_views(workers, beats, in_flight),
        workers=workers,
        **common(context, session),
    )


@router.get("/static/{name}")
async def static(name: str) -> Response:
    return static_file(name)


# -- signing in -------------------------------------------------------------------------------------


@router.get("/login")
async def login_form(request: Request) -> Response:
    return _login(request, ui_context(request), error=None)


def _login(request: Request, context: UiContext, error: str | None) -> Response:
    nonce = uuid.uuid4().hex
    response = html(
        "login.html",
        status_code=401 if error else 200,
        error=error,
        nonce=nonce,
        next=_next(request.query_params.get("next")),
        keys=bool(context.ui.api_keys) and not context.ui.basic_auth,
        **common(context, None),
    )
    set_cookie(response, request, LOGIN_COOKIE, nonce, 600)
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    context = ui_context(request)
    fields = await form_fields(request) or {}
    if not valid_login_nonce(request, fields.get("nonce")):
        return _login(request, context, "The sign-in form expired: try again.")
    session = key_session(context.ui, fields.get("key", "").strip())
    if session is None:
        return _login(request, context, "That is not one of the service's API keys.")
    response = RedirectResponse(_next(fields.get("next")), status_code=303)
    set_cookie(response, request, SESSION_COOKIE, session.cookie, SESSION_TTL_S)
    response.delete_cookie(LOGIN_COOKIE, path="/ui")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    async def out(request: Request, context: UiContext, session: Session, fields: dict[str, str]) -> Response:
        await sign_out(context.events.client, session)
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/ui")
        return response

    return await acted(request, out)


def _next(target: str | None) -> str:
    """Where to go after signing in: a page of the view, never another site."""
    if target and target.startswith("/ui") and "//" not in target and "\\" not in target:
        return target
    return "/ui"


async def _story_of(context: UiContext, invocation_id: str) -> data.Story | None:
    """The journal's story of the invocation, given a moment when it is just starting."""
    return await once_journaled(
        context.events, invocation_id, lambda: context.journal.run(lambda j: data.story(j, invocation_id))
    )


def _printable(text: str) -> str:
    """`text` without its control characters: no name or id holds one, and PostgreSQL refuses NUL."""
    return "".join(character for character in text if character.isprintable())


def uuid_or_none(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None
