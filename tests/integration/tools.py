"""Tools served by the integration tests' worker processes (pools `alpha`, `beta` and `heavy`)."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Annotated

from tests.integration.side_effects import count_runs_and_sleep, process_client
from workers import (
    Image,
    InvocationContext,
    InvocationParameters,
    Param,
    TextContent,
    ToolErrorVisibleToLlm,
    ToolExecutionResult,
    ToolMemoryId,
    tool,
)


class Declined(ToolErrorVisibleToLlm, Exception):
    """A failure whose message the model may see."""


class Flaky(Exception):
    """A transient failure the tool declares retryable."""


@dataclass
class Point:
    x: int
    y: int = 0


@tool("Echoes its text", pool="alpha", timeout=10)
def echo(text: str, times: int = 1) -> str:
    return " ".join([text] * times)


@tool("Where the call ran", pool="alpha", timeout=10)
def whereami() -> dict[str, object]:
    return {"pid": os.getpid(), "host": socket.gethostname()}


@tool("Where the call ran, on the other pool", pool="beta", timeout=10)
def whereami_beta() -> dict[str, object]:
    return {"pid": os.getpid(), "host": socket.gethostname()}


@tool("Sleeps, then answers", pool="alpha", timeout=5)
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds}"


@tool("Sleeps on the prefork pool", pool="heavy", timeout=5)
def slow_heavy(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds}"


@tool("Fails in a chosen way", pool="alpha", timeout=10)
def fail(how: str) -> str:
    if how == "visible":
        raise Declined("card declined")
    if how == "visible_blank":
        raise Declined("   ")
    if how == "empty":
        raise RuntimeError()
    raise ValueError(f"broken: {how}")


@tool("Uses defaults", pool="alpha", timeout=10)
def defaults(tags: list[str] = ["a"], point: Point = Point(1, 2), limit: int = 10) -> dict[str, object]:  # noqa: B006, B008
    tags.append("mutated")
    return {"tags": tags, "point": point, "limit": limit}


@tool("Reads injected data", pool="alpha", timeout=10)
def injected(
    params: InvocationParameters, context: InvocationContext, memory_id: ToolMemoryId
) -> dict[str, object]:
    return {
        "params": dict(params),
        "invocation_id": str(context.invocation_id),
        "memory_id": memory_id,
        "user_message": context.user_message,
    }


@tool("Writes an invocation parameter", pool="alpha", timeout=10)
def remember(key: str, value: str, params: InvocationParameters) -> str:
    params[key] = value
    return "remembered"


@tool("Reads an invocation parameter on the other pool", pool="beta", timeout=10)
def recall(key: str, params: InvocationParameters) -> str:
    return str(params.get(key, "<missing>"))


@tool("Returns an image and a caption", pool="alpha", timeout=10)
def picture(caption: Annotated[str, Param("what the picture shows")]) -> list[object]:
    return [TextContent(caption), Image(base64_data="iVBORw0KGgo=", mime_type="image/png")]


@tool("Returns attributes with its result", pool="alpha", timeout=10)
def tagged(value: int) -> ToolExecutionResult:
    return ToolExecutionResult(result_object={"value": value}, attributes={"source": "tagged", "n": value})


@tool("Nothing to return", pool="alpha", timeout=10)
def nothing() -> None:
    return None


@tool("Counts its runs in Redis, then sleeps", pool="heavy", timeout=20, idempotent=True, retries=2)
def count_and_sleep_idempotent(key: str, seconds: float) -> int:
    return count_runs_and_sleep(key, seconds)


@tool("Counts its runs in Redis, then sleeps", pool="heavy", timeout=20)
def count_and_sleep(key: str, seconds: float) -> int:
    return count_runs_and_sleep(key, seconds)


@tool("Fails the first attempts, then succeeds", pool="alpha", timeout=10, retries=3, retry_on=(Flaky,))
def flaky(key: str, failures: int) -> int:
    attempt = int(process_client().incr(f"test:attempts:{key}"))
    if attempt <= failures:
        raise Flaky(f"attempt {attempt} failed")
    return attempt


class BrandNewError(Exception):
    """An exception type the prefork parent process has never seen."""


@tool("Fails on the prefork pool", pool="heavy", timeout=10)
def fail_heavy(message: str) -> str:
    raise BrandNewError(message)
