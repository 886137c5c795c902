"""Tools served on pool `bad` by the bad-input and security tests' own worker process.

Every tool echoes what it was given (so a bound value can be checked) or misbehaves in one chosen
way: a result that cannot be serialized, one too large, an exception holding a secret. Names start
with `bad_` so they never clash with the session pools' tools in the shared catalog.
"""

from __future__ import annotations

import enum
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from workers import Image, InvocationParameters, ToolErrorVisibleToLlm, compensate_for, tool

if TYPE_CHECKING:
    from workers.runtime.process import WorkerProcess

POOL = "bad"
MAX_RESULT_BYTES = 65536
SECRET = "hunter2-s3cr3t-in-the-message"
CAUSE_SECRET = "sk-cause-0f1e2d3c4b5a"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"])


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


@dataclass
class Point:
    x: int
    y: int = 0


class Flaky(Exception):
    """A transient failure the retrying tool declares retryable."""


class Unprintable(Exception):
    """An exception whose text cannot be produced."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ failed")


# -- one tool per parameter type -------------------------------------------------------------------


@tool("Takes an int", pool=POOL, timeout=10)
def bad_int(value: int) -> int:
    return value


@tool("Takes a float", pool=POOL, timeout=10)
def bad_float(value: float) -> float:
    return value


@tool("Takes a bool", pool=POOL, timeout=10)
def bad_bool(value: bool) -> bool:
    return value


@tool("Takes a str", pool=POOL, timeout=10)
def bad_str(value: str) -> str:
    return value


@tool("Takes an enum", pool=POOL, timeout=10)
def bad_enum(value: Color) -> str:
    return value.name


@tool("Takes a list of ints", pool=POOL, timeout=10)
def bad_list(value: list[int]) -> list[int]:
    return value


@tool("Takes a dataclass", pool=POOL, timeout=10)
def bad_point(value: Point) -> Point:
    return value


@tool("Takes one parameter of every kind", pool=POOL, timeout=10)
def bad_mixed(
    i: int, f: float, b: bool, s: str, e: Color, items: list[int], p: Point, opt: int = 5
) -> dict[str, object]:
    return {"i": i, "f": f, "b": b, "s": s, "e": e, "items": items, "p": p, "opt": opt}


# -- results that cannot cross the wire -------------------------------------------------------------


@tool("Returns a plain object", pool=POOL, timeout=10)
def bad_object() -> object:
    return object()


@tool("Returns NaN", pool=POOL, timeout=10)
def bad_nan() -> float:
    return float("nan")


@tool("Returns a dict with a tuple key", pool=POOL, timeout=10)
def bad_tuple_key() -> dict[object, int]:
    return {(1, 2): 3}


@tool("Returns a string of `size` characters", pool=POOL, timeout=10)
def bad_huge(size: int) -> str:
    return "x" * size


@tool("Returns a picture of `size` base64 characters", pool=POOL, timeout=10)
def bad_huge_image(size: int) -> Image:
    return Image(base64_data="A" * size, mime_type="image/png")


@tool("Raises an exception with a message of `size` characters", pool=POOL, timeout=10)
def bad_huge_error(size: int) -> str:
    raise ValueError("e" * size)


@tool("Raises an exception whose text cannot be produced", pool=POOL, timeout=10)
def bad_unprintable() -> str:
    raise Unprintable()


# -- secrets ---------------------------------------------------------------------------------------


@tool("Fails with a secret in its message and in its cause", pool=POOL, timeout=10)
def bad_secret() -> str:
    try:
        raise KeyError(f"token {CAUSE_SECRET}")
    except KeyError as cause:
        raise RuntimeError(f"connect failed: password={SECRET}") from cause


@tool("Fails with a message for the model; the secret stays in the cause", pool=POOL, timeout=10)
def bad_visible_secret() -> str:
    raise ToolErrorVisibleToLlm.from_message("Card declined", cause=RuntimeError(f"pin {SECRET}"))


@tool("Answers; reads nothing of the invocation parameters", pool=POOL, timeout=10)
def bad_plain(text: str) -> str:
    return f"plain {text}"


@tool(
    "Fails `failures` times with a retryable error, then answers",
    pool=POOL,
    timeout=10,
    retries=2,
    retry_on=(Flaky,),
)
def bad_flaky(key: str, failures: int) -> int:
    attempt = int(_redis().incr(f"badinput:attempts:{key}"))
    if attempt <= failures:
        raise Flaky(f"attempt {attempt} failed")
    return attempt


class LateTools:
    """A compensable tool that finishes after its deadline, so its worker enqueues the compensation."""

    @tool("Sleeps past its deadline, then answers", pool=POOL, timeout=1)
    def bad_late(self, key: str, seconds: float) -> str:
        time.sleep(seconds)
        return f"late {key}"

    @compensate_for("bad_late")
    def undo_late(self, key: str, seconds: float) -> None:
        _redis().incr(f"badinput:undone:{key}")


late_tools = LateTools()


# -- side effects the security tests look for ------------------------------------------------------


@tool("Records that it ran, in Redis", pool=POOL, timeout=10)
def bad_mark(key: str) -> str:
    _redis().set(f"badinput:ran:{key}", "1", ex=600)
    return f"marked {key}"


@tool("Reads an invocation parameter (and so receives them all)", pool=POOL, timeout=10)
def bad_param_reader(name: str, params: InvocationParameters) -> str:
    return "present" if name in params else "absent"


def start_worker(redis_url: str, log_path: Path, hostname: str, *, loglevel: str = "INFO") -> WorkerProcess:
    """A threads worker serving pool `bad` with this module's tools (wait for it with `wait_ready`)."""
    from tests.integration.worker_processes import tool_worker

    limit = {"TOOLFLEET_MAX_RESULT_BYTES": str(MAX_RESULT_BYTES)}
    return tool_worker(redis_url, [POOL], [__name__], log_path, hostname, env=limit, loglevel=loglevel)
