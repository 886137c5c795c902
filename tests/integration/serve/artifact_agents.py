"""The agent and tool of the artifact tests, the tool on pool `artifacts`.

`drawer` asks its tool `draw` once, with the user's message as `ns`, then answers `drawn: <the
tool's result>`. `draw` returns the artifacts `made(ns)` describes: a binary file of several
megabytes whose bytes depend on `ns` alone (streamed back, chunk by chunk), a long text, a short
one, a PNG picture, and a file whose media type is no header's (a tool names its artifacts' types).
The agent journals to `TOOLFLEET_DATABASE_URL`.
"""

from __future__ import annotations

import json
import os
import random
import struct
import zlib
from dataclasses import dataclass

from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    Journal,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models.base import ChatRequest
from workers import tool
from workers.artifacts import Artifact

POOL = "artifacts"
BIG_BYTES = (5 << 19) + 12_345  # 2.5 MiB and some: three chunks of 1 MiB, the last one short
BIG_NAME = 'report "Q1" – ünïcødé\\ end.bin'  # quotes, a backslash, non-ASCII: the header quotes them
LONG_TEXT_LINE = "line {:04d}: the quick brown fox jumps over the lazy dog\n"
BAD_MEDIA_TYPE = "text/html\r\nX-Injected: 1"


@dataclass(frozen=True)
class Made:
    """One artifact `draw` returns: its name, media type and bytes."""

    name: str
    media_type: str
    data: bytes


def png(width: int, height: int) -> bytes:
    """A valid RGB PNG of `width` x `height` pixels, a blue-to-red gradient."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(
        b"\x00"
        + b"".join(
            bytes((255 * x // max(1, width - 1), 0, 255 - 255 * x // max(1, width - 1))) for x in range(width)
        )
        for _ in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def made(ns: str) -> list[Made]:
    """What `draw(ns)` returns, in order: the same for the same `ns`, in the test as on the worker."""
    big = random.Random(ns).randbytes(BIG_BYTES)
    long_text = "".join(LONG_TEXT_LINE.format(n) for n in range(200))  # 11,400 characters
    return [
        Made(BIG_NAME, "application/octet-stream", big),
        Made("notes.md", "text/markdown", long_text.encode()),  # no charset: none is to be added
        Made("short.txt", "text/plain; charset=utf-8", f"<b>{ns}</b> & short".encode()),
        Made("dot.png", "image/png", png(640, 480)),
        Made("odd.html", BAD_MEDIA_TYPE, b"<script>alert(1)</script>"),
    ]


@tool("Draws the files of `ns`", pool=POOL, timeout=30)
def draw(ns: str) -> list[Artifact]:
    return [Artifact(item.data, name=item.name, media_type=item.media_type) for item in made(ns)]


def _script(request: ChatRequest) -> AiMessage | str:
    results = [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]
    if results:
        return f"drawn: {results[-1].text}"
    ns = next(m.single_text for m in request.messages if isinstance(m, UserMessage))
    return AiMessage(tool_execution_requests=[ToolExecutionRequest("draw-1", "draw", json.dumps({"ns": ns}))])


def drawer() -> AiService:
    """Calls `draw` once, then answers with what it returned."""
    return AiService(
        chat_model=ScriptedChatModel(_script),
        tools=[draw],
        executor=CeleryExecutor(),
        journal=Journal(os.environ["TOOLFLEET_DATABASE_URL"]),
        name="drawer",
    )
