"""The tool of measure 17, served by a worker of its own (`toolfleet worker --tools bench.artifacts`):
a file on the worker's machine returned as an artifact, which the worker streams to the artifact store."""

from __future__ import annotations

from workers import tool
from workers.artifacts import Artifact

POOL = "bench.artifacts"


@tool("Returns the file at `path` as an artifact", pool=POOL, timeout=120)
def file_artifact(path: str) -> Artifact:
    return Artifact(path=path, media_type="application/octet-stream")
