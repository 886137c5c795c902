"""How the service answers a request that meets its Redis away (restarting, out of reach): 503 with
`Retry-After`, which clients send again (the OpenAI SDK does by itself), never a 500."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import redis.exceptions
from fastapi import FastAPI

from orchestrator.server.app import _install_error_handlers


def _app() -> FastAPI:
    app = FastAPI()
    _install_error_handlers(app)

    @app.post("/v1/invocations/{invocation_id}/cancel")
    async def cancel(invocation_id: str) -> None:
        raise redis.exceptions.ConnectionError("Connection closed by server.")

    @app.get("/v1/invocations/{invocation_id}")
    async def read(invocation_id: str) -> None:
        raise redis.exceptions.TimeoutError("Timeout reading from socket")

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("not Redis")

    return app


def _ask(method: str, path: str) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=_app(), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.request(method, path)

    return asyncio.run(call())


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/v1/invocations/i-1/cancel"), ("GET", "/v1/invocations/i-1")]
)
def test_a_request_that_meets_redis_away_is_answered_503_to_send_again(
    method: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    # when: the route's Redis refuses the connection, or does not answer in time
    response = _ask(method, path)

    # then: 503, in the OpenAI error shape, with Retry-After; the log says what happened
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json() == {
        "error": {
            "message": "the service's Redis cannot be reached just now: send the request again",
            "type": "server_error",
            "param": None,
            "code": "service_unavailable",
        }
    }
    assert f"{method} {path}: Redis cannot be reached" in caplog.text


def test_anything_else_unexpected_is_still_a_500() -> None:
    response = _ask("GET", "/boom")
    assert response.status_code == 500
    assert "retry-after" not in response.headers
