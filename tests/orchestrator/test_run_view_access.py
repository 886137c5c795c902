"""Who may use the run view, in process (no browser, no worker): the key sign-in and its session
cookie, basic authentication, the form token on every POST, and settings that would expose it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.server.ui import UiSettings
from tests._ports import free_port
from tests.orchestrator._view_clients import view_client
from workers.errors import SettingsError

KEY = "sk-view-key-0123456789"


@pytest.fixture
def run() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_key_signs_in_once_and_the_session_cookie_is_httponly_and_strict(
    tmp_path: Path, run: asyncio.AbstractEventLoop
) -> None:
    async def story() -> None:
        async with view_client(tmp_path, UiSettings(api_keys=("old", KEY))) as client:
            first = await client.get("/ui/pools?x=1")
            assert first.status_code == 303
            assert first.headers["location"] == "/ui/login?next=%2Fui%2Fpools%3Fx%3D1"
            form = await client.get("/ui/login")
            nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
            assert nonce is not None
            wrong = await client.post("/ui/login", data={"nonce": nonce[1], "key": "guess", "next": "/ui"})
            assert wrong.status_code == 401 and "not one of the service" in wrong.text
            forged = await client.post("/ui/login", data={"nonce": "made-up", "key": KEY})
            assert forged.status_code == 401 and "expired" in forged.text
            fresh = re.search(r'name="nonce" value="([^"]+)"', forged.text)  # each form has its own
            assert fresh is not None
            signed = await client.post(
                "/ui/login", data={"nonce": fresh[1], "key": KEY, "next": "//evil.example/ui"}
            )
            assert signed.status_code == 303 and signed.headers["location"] == "/ui"
            cookie = signed.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie and KEY not in cookie
            page = await client.get("/ui")
            assert page.status_code == 200 and "No invocation matches" in page.text
            assert "script-src 'self'" in page.headers["content-security-policy"]

    run.run_until_complete(story())


def test_every_post_needs_the_sessions_form_token(tmp_path: Path, run: asyncio.AbstractEventLoop) -> None:
    async def story() -> None:
        async with view_client(tmp_path, UiSettings(api_keys=(KEY,))) as client:
            form = await client.get("/ui/login")
            nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
            assert nonce is not None
            await client.post("/ui/login", data={"nonce": nonce[1], "key": KEY})
            token = re.search(r'name="csrf" value="([^"]+)"', (await client.get("/ui")).text)
            assert token is not None
            assert (await client.post("/ui/logout", data={})).status_code == 403
            assert (await client.post("/ui/logout", data={"csrf": "0" * 64})).status_code == 403
            out = await client.post("/ui/logout", data={"csrf": token[1]})
            assert out.status_code == 303 and out.headers["location"] == "/ui/login"

    run.run_until_complete(story())


async def _signed_in(client: httpx.AsyncClient) -> str:
    """Sign `client` in with KEY; the page's form token."""
    form = await client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    assert (await client.post("/ui/login", data={"nonce": nonce[1], "key": KEY})).status_code == 303
    token = re.search(r'name="csrf" value="([^"]+)"', (await client.get("/ui")).text)
    assert token is not None
    return token[1]


def test_signing_out_ends_the_session_for_every_copy_of_its_cookie(
    tmp_path: Path, run: asyncio.AbstractEventLoop
) -> None:
    async def story() -> None:
        async with view_client(tmp_path, UiSettings(api_keys=(KEY,))) as client:
            token = await _signed_in(client)
            kept = client.cookies["toolfleet_ui_session"]  # what a stolen or copied cookie would be
            assert (await client.post("/ui/logout", data={"csrf": token})).status_code == 303
            client.cookies.set("toolfleet_ui_session", kept, path="/ui")
            again = await client.get("/ui/pools")
            assert again.status_code == 303 and again.headers["location"].startswith("/ui/login")
            # another session of the same key is not touched
            client.cookies.clear()
            other = await _signed_in(client)
            assert other != token and (await client.get("/ui/pools")).status_code == 200

    run.run_until_complete(story())


def test_a_session_signed_out_on_one_replica_is_refused_by_another(
    tmp_path: Path, run: asyncio.AbstractEventLoop
) -> None:
    async def story() -> None:
        ui = UiSettings(api_keys=(KEY,))
        async with view_client(tmp_path, ui) as first, view_client(tmp_path, ui) as second:
            token = await _signed_in(first)
            second.cookies.set("toolfleet_ui_session", first.cookies["toolfleet_ui_session"], path="/ui")
            assert (await second.get("/ui/pools")).status_code == 200  # any replica checks the cookie
            assert (await first.post("/ui/logout", data={"csrf": token})).status_code == 303
            refused = await second.get("/ui/pools")
            assert refused.status_code == 303 and refused.headers["location"].startswith("/ui/login")

    run.run_until_complete(story())


def test_a_session_is_not_let_in_while_redis_cannot_say_whether_it_signed_out(
    tmp_path: Path, run: asyncio.AbstractEventLoop
) -> None:
    async def story() -> None:
        async with view_client(tmp_path, UiSettings(api_keys=(KEY,))) as client:
            await _signed_in(client)
            cookie = client.cookies["toolfleet_ui_session"]
        nowhere = f"redis://127.0.0.1:{free_port()}/0"
        async with view_client(tmp_path, UiSettings(api_keys=(KEY,)), nowhere) as client:
            client.cookies.set("toolfleet_ui_session", cookie, path="/ui")
            refused = await client.get("/ui/pools")
            assert refused.status_code == 503 and "cannot reach Redis" in refused.text

    run.run_until_complete(story())


def test_basic_authentication_when_configured(tmp_path: Path, run: asyncio.AbstractEventLoop) -> None:
    async def story() -> None:
        async with view_client(tmp_path, UiSettings(basic_auth="ops:s3cret", api_keys=(KEY,))) as client:
            refused = await client.get("/ui")
            assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
            assert (await client.get("/ui", auth=("ops", "nope"))).status_code == 401
            assert (await client.get("/ui", auth=("ops", "s3cret"))).status_code == 200

    run.run_until_complete(story())


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (UiSettings(host="0.0.0.0"), "TOOLFLEET_API_KEYS or TOOLFLEET_UI_BASIC_AUTH"),
        (None, "user:password"),
        (None, "http:// or https://"),
    ],
)
def test_settings_that_would_expose_or_break_the_view_are_refused(
    settings: UiSettings | None, says: str
) -> None:
    with pytest.raises(SettingsError, match=re.escape(says)):
        if settings is not None:
            settings.check_listening()
        elif says == "user:password":
            UiSettings(basic_auth="nouser")
        else:
            UiSettings(flower_url="flower:5555")
