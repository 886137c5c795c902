"""HTTP calls to model providers: retries with backoff on 429/5xx and connection errors, one mapping
of failures to the package's error types, with the provider's own message, and a client per event loop."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from orchestrator.errors import (
    ModelAuthenticationError,
    ModelConnectionError,
    ModelError,
    ModelInvalidRequestError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
)

__all__ = [
    "Endpoint",
    "LoopClients",
    "RetryPolicy",
    "loads",
    "post_json",
    "post_stream",
    "provider_message",
    "redact_headers",
]

log = logging.getLogger(__name__)

_SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class LoopClients:
    """One HTTP client per event loop, made by `make` on first use: an httpx client must not be shared
    across loops; the client of a finished loop is dropped with it."""

    def __init__(self, make: Callable[[], httpx.AsyncClient]) -> None:
        self._make = make
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def current(self) -> httpx.AsyncClient:
        """The running loop's client: a new one when it has none yet, or closed it."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = self._clients[loop] = self._make()
        return client

    async def aclose(self) -> None:
        """Close the running loop's client, if it has one (a new one is made if used again)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a provider call."""

    max_retries: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0

    def delay_s(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_s * (2**attempt))
        return random.uniform(ceiling / 2, ceiling)


def provider_message(response: httpx.Response) -> str:
    """The provider's own error message: `error.message` in OpenAI's and Anthropic's formats."""
    try:
        body: Any = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if body.get("message"):
            return str(body["message"])
    return response.text[:500]


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _secrets(headers: dict[str, str]) -> list[str]:
    """Credential values in request headers (the last word: a bearer token's token)."""
    found = [v.split()[-1] for k, v in headers.items() if k.lower() in _SECRET_HEADERS and v.strip()]
    return [s for s in found if len(s) >= 4]


def _status_error(provider: str, response: httpx.Response, secrets: list[str]) -> ModelError:
    status = response.status_code
    message = f"{provider} returned HTTP {status}: {provider_message(response)}"
    for secret in secrets:  # a server that echoes the key must not put it into logs or errors
        message = message.replace(secret, "***")
    kind: type[ModelError]
    if status in (401, 403):
        kind = ModelAuthenticationError
    elif status == 429:
        kind = ModelRateLimitError
    elif status >= 500:
        kind = ModelServerError
    else:
        kind = ModelInvalidRequestError
    return kind(message, provider=provider, status=status)


def _transport_error(provider: str, exc: httpx.TransportError) -> ModelError:
    if isinstance(exc, httpx.TimeoutException):
        return ModelTimeoutError(
            f"{provider} did not answer in time: {type(exc).__name__}", provider=provider
        )
    return ModelConnectionError(f"{provider} could not be reached: {exc}", provider=provider)


@dataclass(frozen=True)
class Endpoint:
    """Where a provider's requests go: the client, the URL, the headers, the provider's name (for
    errors and logs) and the retry policy."""

    client: httpx.AsyncClient
    url: str
    headers: dict[str, str]
    provider: str
    policy: RetryPolicy


async def post_json(endpoint: Endpoint, body: dict[str, Any]) -> dict[str, Any]:
    """POST `body`, retrying transient failures; the parsed JSON answer, or a `ModelError`."""
    client, url, headers = endpoint.client, endpoint.url, endpoint.headers
    provider, policy = endpoint.provider, endpoint.policy
    attempt = 0
    while True:
        started = time.perf_counter()
        cause: httpx.TransportError | None = None  # kept as the mapped error's cause
        try:
            response = await client.post(url, json=body, headers=headers)
        except httpx.TransportError as exc:
            error: ModelError = _transport_error(provider, exc)
            cause, retry_after = exc, None
        else:
            if response.is_success:
                log.debug("%s POST %s: %d in %.0f ms", provider, url, response.status_code, _ms(started))
                try:
                    parsed: dict[str, Any] = response.json()
                except ValueError as exc:
                    raise ModelError(
                        f"{provider} answered with invalid JSON: {exc}", provider=provider
                    ) from exc
                return parsed
            error = _status_error(provider, response, _secrets(headers))
            retry_after = _retry_after(response)
            if response.status_code not in RETRYABLE_STATUS:
                raise error
        if attempt >= policy.max_retries:
            raise error from cause
        attempt = await _pause_before_retry(provider, policy, attempt, error, retry_after)


Events = AsyncGenerator[tuple[str | None, str], None]  # server-sent events as `(event, data)`


async def post_stream(endpoint: Endpoint, body: dict[str, Any]) -> Events:
    """POST `body` and yield server-sent events as `(event, data)`; retries only before the first byte."""
    client, url, headers = endpoint.client, endpoint.url, endpoint.headers
    provider, policy = endpoint.provider, endpoint.policy
    attempt = 0
    while True:
        try:
            async with client.stream("POST", url, json=body, headers=headers) as response:
                if not response.is_success:
                    await response.aread()
                    error: ModelError = _status_error(provider, response, _secrets(headers))
                    retry_after = _retry_after(response)
                    if response.status_code not in RETRYABLE_STATUS or attempt >= policy.max_retries:
                        raise error
                else:
                    async for event in _sse(response):
                        yield event
                    return
        except httpx.TransportError as exc:
            error = _transport_error(provider, exc)
            retry_after = None
            if attempt >= policy.max_retries:
                raise error from exc
        attempt = await _pause_before_retry(provider, policy, attempt, error, retry_after)


async def _pause_before_retry(
    provider: str, policy: RetryPolicy, attempt: int, error: ModelError, retry_after: float | None
) -> int:
    """Wait as `policy` says before retry `attempt + 1` (or as the server's Retry-After asks); the
    number of the next attempt."""
    delay = policy.delay_s(attempt, retry_after)
    log.warning("%s: %s; retry %d/%d in %.2f s", provider, error, attempt + 1, policy.max_retries, delay)
    await asyncio.sleep(delay)
    return attempt + 1


async def _sse(response: httpx.Response) -> Events:
    """Server-sent events: `event:` and `data:` lines, an empty line ends an event."""
    event: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield event, "\n".join(data)


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers safe to log: credentials masked."""
    return {k: ("***" if k.lower() in _SECRET_HEADERS else v) for k, v in headers.items()}


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def loads(data: str, provider: str) -> Any:
    """Parse one event's JSON data, as a `ModelError` if it is unreadable."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ModelError(f"{provider} streamed invalid JSON: {exc}", provider=provider) from exc
