"""Who may look at the run view, and proof that a form was sent from it.

A browser cannot send the service's `Authorization: Bearer` header, so a person signs in once with
one of the service's keys (`TOOLFLEET_API_KEYS`) on a form: the view answers with a session cookie
(HttpOnly, SameSite=Strict) whose value is a random nonce, its time of issue, and an HMAC of both
under that key: any replica checks it, and removing the key ends its sessions. Signing out ends the
session everywhere: its nonce is kept in Redis (`SIGNED_OUT_KEY`) until the cookie would have expired,
and a cookie whose nonce is there is refused. With `TOOLFLEET_UI_BASIC_AUTH` the browser's HTTP basic
authentication is asked instead.
A session is its key's tenant's (`Session.viewer`): it sees that tenant's invocations, or every
tenant's with the key's `admin` scope; basic authentication and an open view let operators in.

Every form carries a token derived from the session (an HMAC of its nonce under the same secret),
checked on every POST: a page of another site can make a browser send the cookie or the basic
credentials, never read the token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

import redis.asyncio as aioredis
from fastapi import Request
from fastapi.responses import Response

from orchestrator.server.tenants import OPERATOR, Viewer, matching_key
from orchestrator.server.ui.settings import UiSettings

__all__ = [
    "LOGIN_COOKIE",
    "SESSION_COOKIE",
    "SESSION_TTL_S",
    "SIGNED_OUT_KEY",
    "Session",
    "basic_refusal",
    "form_fields",
    "issue_session",
    "key_session",
    "set_cookie",
    "sign_out",
    "signed_out",
    "valid_login_nonce",
]

SESSION_COOKIE = "toolfleet_ui_session"
LOGIN_COOKIE = "toolfleet_ui_login"  # the nonce the sign-in form repeats (login CSRF)
SESSION_TTL_S = 12 * 3600
SIGNED_OUT_KEY = "toolfleet:ui:signed-out:{}"  # a session's nonce, once it signed out
MAX_FORM_BYTES = 256 * 1024
_PROCESS_SECRET = secrets.token_bytes(32)  # signs sessions of an open view (no keys, no basic auth)


@dataclass(frozen=True)
class Session:
    """A signed-in browser: the nonce of its cookie, the secret that signed it, and who it is (the
    tenant of the key that signed it)."""

    nonce: str
    issued_at: int
    secret: bytes
    viewer: Viewer

    @property
    def cookie(self) -> str:
        return f"{self.nonce}.{self.issued_at}.{_mac(self.secret, 'session', self.nonce, self.issued_at)}"

    @property
    def csrf_token(self) -> str:
        return _mac(self.secret, "csrf", self.nonce, self.issued_at)

    def accepts(self, token: str | None) -> bool:
        """Whether `token` is this session's form token."""
        return bool(token) and hmac.compare_digest(str(token).encode(), self.csrf_token.encode())


def signers_of(ui: UiSettings) -> list[tuple[bytes, Viewer]]:
    """What may sign a session, and who a session it signed is: each key (its tenant), the basic
    credentials or this process's own secret (an operator)."""
    if ui.basic_auth:
        return [(ui.basic_auth.encode(), OPERATOR)]
    if ui.api_keys:
        return [(key.key.encode(), key.viewer) for key in ui.api_keys]
    return [(_PROCESS_SECRET, OPERATOR)]


def key_session(ui: UiSettings, presented: str) -> Session | None:
    """A new session signed by the key `presented`, if it is one of the service's (checked in
    constant time against each)."""
    matched = matching_key(ui.api_keys, presented)
    return None if matched is None else issue_session(matched.key.encode(), matched.viewer)


def issue_session(secret: bytes, viewer: Viewer) -> Session:
    return Session(secrets.token_urlsafe(18), int(time.time()), secret, viewer)


def session_of(ui: UiSettings, request: Request) -> Session | None:
    """The valid, unexpired session the request's cookie names, or None."""
    nonce, _, rest = request.cookies.get(SESSION_COOKIE, "").partition(".")
    issued, _, mac = rest.partition(".")
    if not (nonce and issued.isdigit() and mac):
        return None
    if time.time() - int(issued) > SESSION_TTL_S:
        return None
    for secret, viewer in signers_of(ui):
        if hmac.compare_digest(mac.encode(), _mac(secret, "session", nonce, int(issued)).encode()):
            return Session(nonce, int(issued), secret, viewer)
    return None


async def sign_out(client: aioredis.Redis, session: Session) -> None:
    """End `session` on every replica: its nonce is refused until its cookie would have expired."""
    left = session.issued_at + SESSION_TTL_S - int(time.time())
    if left > 0:
        await client.set(SIGNED_OUT_KEY.format(session.nonce), 1, ex=left)


async def signed_out(client: aioredis.Redis, session: Session) -> bool:
    """Whether `session` signed out (raises when Redis cannot say)."""
    return bool(await client.exists(SIGNED_OUT_KEY.format(session.nonce)))


def basic_refusal(ui: UiSettings, request: Request) -> Response | None:
    """401 asking for basic credentials unless the request carries `ui.basic_auth`'s."""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    given = b""
    if scheme.lower() == "basic":
        try:
            given = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            given = b""
    if given and hmac.compare_digest(given, ui.basic_auth.encode()):
        return None
    return Response(
        "sign in to see the toolfleet run view",
        status_code=401,
        headers={"WWW-Authenticate": 'Basic realm="toolfleet", charset="UTF-8"'},
        media_type="text/plain",
    )


def set_cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def valid_login_nonce(request: Request, given: str | None) -> bool:
    """Whether the sign-in form repeated the nonce of its own cookie (a form another site posts
    cannot know it)."""
    expected = request.cookies.get(LOGIN_COOKIE, "")
    return bool(expected and given) and hmac.compare_digest(expected.encode(), str(given).encode())


async def form_fields(request: Request) -> dict[str, str] | None:
    """The fields of a urlencoded form (the first value of each), or None when the body is not one
    or is too large."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        return None
    return {name: values[0] for name, values in parsed.items()}


def _mac(secret: bytes, purpose: str, nonce: str, issued_at: int) -> str:
    message = f"toolfleet-ui:{purpose}:{nonce}:{issued_at}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()
