"""Artifacts in a tool's result: stored as the result is converted, and what the model reads of them.

A call's results are converted under `writing_artifacts(...)`: every `Artifact` met on the way is
written to the store and replaced by its reference, and a result whose text is larger than the inline
limit is itself stored as an artifact, the model reading its beginning and where the rest is.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from workers.artifacts._values import Artifact, ArtifactRef
from workers.artifacts.store import ArtifactStore, store_for
from workers.contents import Content, Image, ImageContent, TextContent
from workers.errors import ToolResultError
from workers.tenants import tenant_of

__all__ = [
    "DEFAULT_INLINE_RESULT_BYTES",
    "PREVIEW_CHARS",
    "ArtifactSink",
    "ArtifactWriter",
    "describe",
    "size_text",
    "stored_contents",
    "stored_ref",
    "writing_artifacts",
]

DEFAULT_INLINE_RESULT_BYTES = 256 << 10
PREVIEW_CHARS = 2000  # how much of a text artifact the model reads in its result


@dataclass(frozen=True)
class ArtifactSink:
    """Where a process's tool calls put their artifacts, and the largest result kept inline."""

    url: str
    inline_result_bytes: int = DEFAULT_INLINE_RESULT_BYTES

    @property
    def store(self) -> ArtifactStore:
        return store_for(self.url)

    @classmethod
    def from_env(cls) -> ArtifactSink:
        """The sink the `TOOLFLEET_ARTIFACT_URL` and `TOOLFLEET_INLINE_RESULT_BYTES` variables name."""
        return _sink_of(
            os.environ.get("TOOLFLEET_ARTIFACT_URL"), os.environ.get("TOOLFLEET_INLINE_RESULT_BYTES")
        )


@functools.lru_cache(maxsize=8)
def _sink_of(url: str | None, inline: str | None) -> ArtifactSink:
    """The sink of these two variables' values, read once per process for each pair."""
    from workers.settings import Settings  # the settings import the tool side

    given = {"TOOLFLEET_ARTIFACT_URL": url, "TOOLFLEET_INLINE_RESULT_BYTES": inline}
    settings = Settings.from_env({k: v for k, v in given.items() if v is not None})
    return ArtifactSink(settings.artifact_url, settings.inline_result_bytes)


class ArtifactWriter:
    """One call's artifacts: the sink, whose call it is (read when an artifact is written: most calls
    write none, and pay for no more than this object), and the first bytes of each written."""

    __slots__ = ("_invocation", "call_id", "heads", "sink", "tool")

    def __init__(
        self, sink: ArtifactSink, invocation: Any = None, call_id: str | None = None, tool: str | None = None
    ) -> None:
        self.sink = sink
        self._invocation = invocation  # a `workers.calls.invocation.Invocation`, or None
        self.call_id = call_id
        self.tool = tool
        self.heads: dict[str, bytes] = {}

    def write(self, artifact: Artifact) -> ArtifactRef:
        if artifact.ref is not None:  # an artifact the tool received, returned as it is
            return artifact.ref
        invocation = self._invocation
        try:
            record, head = self.sink.store.put(
                artifact,
                invocation_id=None if invocation is None else str(invocation.context.invocation_id),
                call_id=self.call_id,
                tool=self.tool,
                tenant=None if invocation is None else tenant_of(invocation.parameters),
            )
        except (OSError, ValueError) as exc:
            raise ToolResultError(f"artifact {artifact.name!r} could not be stored: {exc}") from exc
        with _HEADS_LOCK:  # a tool's threads may convert results at once
            self.heads[record.ref.id] = head
        return record.ref


_HEADS_LOCK = threading.Lock()
_WRITER: ContextVar[ArtifactWriter | None] = ContextVar("toolfleet_artifact_writer", default=None)


@contextlib.contextmanager
def writing_artifacts(writer: ArtifactWriter | None) -> Iterator[ArtifactWriter | None]:
    """Convert a result with `writer` storing the artifacts met (none: an artifact is a result error)."""
    token = _WRITER.set(writer)
    try:
        yield writer
    finally:
        _WRITER.reset(token)


def stored_ref(artifact: Artifact) -> ArtifactRef:
    """`artifact` stored by the current call's writer; its reference."""
    writer = _WRITER.get()
    if writer is None:
        if artifact.ref is not None:
            return artifact.ref
        raise ToolResultError(f"artifact {artifact.name!r} was returned where no artifact store is set")
    return writer.write(artifact)


def stored_contents(artifacts: list[Artifact]) -> tuple[str, list[Content] | None, Any]:
    """A result made of artifacts alone: the text the model reads, the contents (an image as image
    content, its bytes fetched by the orchestrator for a model that takes images), the result object."""
    refs = [stored_ref(artifact) for artifact in artifacts]
    writer = _WRITER.get()
    heads = writer.heads if writer is not None else {}
    texts = [describe(ref, heads.get(ref.id)) for ref in refs]
    contents: list[Content] | None = None
    if any(ref.is_image for ref in refs):
        contents = []
        for ref, text in zip(refs, texts, strict=True):
            contents.append(TextContent(text))
            if ref.is_image:
                contents.append(ImageContent(Image(url=ref.ref, mime_type=ref.media_type)))
    result_object = refs[0].to_json() if len(refs) == 1 else [ref.to_json() for ref in refs]
    return "\n".join(texts), contents, result_object


def describe(ref: ArtifactRef, head: bytes | None = None) -> str:
    """What the model reads of an artifact: a text one's beginning (from `head`), then a note of its
    name, type, size and reference; any other, the note alone."""
    note = f"[artifact {ref.name} ({ref.media_type}, {size_text(ref.size)}): {ref.ref}]"
    if not ref.is_text or head is None:
        return note
    text = head.decode("utf-8", "ignore")
    whole = len(head) >= ref.size and len(text) <= PREVIEW_CHARS
    if whole:
        return f"{text}\n{note}"
    shown = text[:PREVIEW_CHARS]
    cut = f"[… the first {len(shown)} characters of {size_text(ref.size)}; the whole text is {ref.ref}]"
    return f"{shown}\n{cut}\n{note}"


def size_text(size: int) -> str:
    """A size as people read it: `812 bytes`, `4.2 KB`, `50.0 MB` (decimal units)."""
    if size < 1000:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KB", "MB", "GB"):
        value /= 1000
        if round(value, 1) < 1000:  # 999,999 bytes: "1.0 MB", not "1000.0 KB"
            return f"{value:.1f} {unit}"
    return f"{value / 1000:.1f} TB"
