"""The tool of the artifact memory tests: a large artifact made a chunk at a time, never held whole."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

from workers import tool
from workers.artifacts import Artifact

POOL = "artifacts"
MIB = 1 << 20


def pattern(mebibytes: int) -> Iterator[bytes]:
    """`mebibytes` MiB of bytes that differ chunk by chunk, a MiB at a time (the same every run)."""
    for index in range(mebibytes):
        yield hashlib.sha256(index.to_bytes(8, "big")).digest() * (MIB // 32)


def pattern_sha256(mebibytes: int) -> str:
    digest = hashlib.sha256()
    for chunk in pattern(mebibytes):
        digest.update(chunk)
    return digest.hexdigest()


@tool("Makes an artifact of `mebibytes` MiB, streamed; says which process made it", pool=POOL, timeout=120)
def make_artifact(mebibytes: int) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "artifact": Artifact(stream=pattern(mebibytes), name=f"{mebibytes}-mib.bin"),
    }
