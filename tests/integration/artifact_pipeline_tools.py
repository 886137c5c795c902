"""Tools of the artifact pipeline tests: one pool renders (an image, a long export), another measures
what it is given by reference, reading it from the artifact store itself."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from typing import Annotated, Any

from workers import Param, tool
from workers.artifacts import Artifact

RENDER_POOL = "render"
MEASURE_POOL = "measure"

# A 1x1 PNG: an image's bytes, as a renderer would write them.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d4944415478da63f8cfc0f01f0005000201a0f1ec5e0000000049454e44ae426082"
)


def export_text(rows: int) -> str:
    return "".join(f"row {index:06d}: {'x' * 40}\n" for index in range(rows))


@tool("Renders a chart of `title` as a PNG image", pool=RENDER_POOL)
def render_chart(title: str) -> Artifact:
    return Artifact(PNG, name=f"{title}.png")


@tool("Exports `rows` rows as text", pool=RENDER_POOL)
def export_rows(rows: int) -> str:
    return export_text(rows)


@tool("Measures an artifact: its size, SHA-256 and the process that read it", pool=MEASURE_POOL)
def measure(source: Annotated[Artifact, Param("the artifact to measure")]) -> dict[str, Any]:
    digest, size = hashlib.sha256(), 0
    for chunk in source.chunks():
        digest.update(chunk)
        size += len(chunk)
    return {"name": source.name, "size": size, "sha256": digest.hexdigest(), "pid": os.getpid()}


SLOW_POOL = "render-slow"


def _slowly(mebibytes: int, pause_s: float) -> Iterator[bytes]:
    for index in range(mebibytes):
        time.sleep(pause_s)
        yield bytes([index % 256]) * (1 << 20)


@tool("Exports `mebibytes` MiB, one every `pause_s` seconds", pool=SLOW_POOL, timeout=60)
def slow_export(mebibytes: int, pause_s: float) -> Artifact:
    return Artifact(stream=_slowly(mebibytes, pause_s), name="slow.bin")
