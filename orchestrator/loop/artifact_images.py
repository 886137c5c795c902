"""Image artifacts in tool results, as the model is sent them.

A tool's image artifact reaches the conversation as image content naming the artifact
(`artifact:<id>`), never its bytes: memory and the journal keep the reference. Before each model
request, a model that takes images in tool results (`supports_tool_result_images`) gets each such
image read from the artifact store as base64 data; any other gets the result's text alone, which
names the image, its type and size. An image's bytes are kept (base64, `CACHE_BYTES` in all, the
least recently sent dropped first) for the model requests that follow: its record is read again
each time, so one removed meanwhile is not sent, and bytes are reused only under the same SHA-256.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

from orchestrator.messages import ChatMessage, ToolExecutionResultMessage
from workers.artifacts import REF_PREFIX, Artifact, ArtifactSink
from workers.contents import Content, Image, ImageContent, TextContent
from workers.errors import ArtifactNotFoundError

__all__ = ["CACHE_BYTES", "MAX_IMAGE_BYTES", "with_artifact_images"]

log = logging.getLogger(__name__)

MAX_IMAGE_BYTES = 20 << 20  # the largest image sent to a model: providers refuse larger ones
CACHE_BYTES = 64 << 20  # images' base64 kept for the requests that follow, in all

_cached: OrderedDict[tuple[str, str], str] = OrderedDict()  # (id, SHA-256) -> base64, latest last
_cached_bytes = 0  # the sum of their lengths
_cache_lock = threading.Lock()  # services on several threads' event loops share it


async def with_artifact_images(messages: Sequence[ChatMessage], takes_images: bool) -> list[ChatMessage]:
    """`messages` with each artifact image of a tool result read for the model, or left out."""
    if not any(_artifact_images(message) for message in messages):
        return list(messages)
    resolved: list[ChatMessage] = []
    for message in messages:
        if not isinstance(message, ToolExecutionResultMessage) or not _artifact_images(message):
            resolved.append(message)
            continue
        parts: list[Content] = []
        for part in message.contents or ():
            if not _is_artifact_image(part):
                parts.append(part)
            elif takes_images:
                parts.append(await _read(part))  # type: ignore[arg-type]
        # no image left: the result's text, which names each image, is what the model reads
        images = any(isinstance(part, ImageContent) for part in parts)
        resolved.append(dataclasses.replace(message, contents=tuple(parts) if images else None))
    return resolved


def _artifact_images(message: ChatMessage) -> bool:
    if not isinstance(message, ToolExecutionResultMessage):
        return False
    return any(_is_artifact_image(part) for part in message.contents or ())


def _is_artifact_image(part: Content) -> bool:
    return isinstance(part, ImageContent) and (part.image.url or "").startswith(REF_PREFIX)


async def _read(part: ImageContent) -> Content:
    """The image's bytes as base64 content; a note in its place when it cannot be sent."""
    reference = part.image.url or ""
    store = ArtifactSink.from_env().store
    try:
        record = await asyncio.to_thread(store.record, reference)
        if record.ref.size > MAX_IMAGE_BYTES:
            return TextContent(f"[image {reference} is {record.ref.size} bytes: too large to show the model]")
        key = (record.ref.id, record.ref.sha256)
        encoded = _recall(key)
        if encoded is None:
            data = await asyncio.to_thread(Artifact.stored(record.ref, store).read_bytes)
            encoded = base64.b64encode(data).decode("ascii")
            _keep(key, encoded)
    except (ArtifactNotFoundError, OSError) as exc:
        log.warning("image artifact %s could not be read for the model: %s", reference, exc)
        return TextContent(f"[image {reference} could not be read: it does not exist (or was removed)]")
    mime_type = record.ref.media_type.split(";", 1)[0].strip()
    return ImageContent(Image(base64_data=encoded, mime_type=mime_type), part.detail)


def _recall(key: tuple[str, str]) -> str | None:
    with _cache_lock:
        encoded = _cached.get(key)
        if encoded is not None:
            _cached.move_to_end(key)
        return encoded


def _keep(key: tuple[str, str], encoded: str) -> None:
    """Keep an image's base64, dropping the least recently sent over `CACHE_BYTES` (one larger is
    not kept)."""
    global _cached_bytes
    if len(encoded) > CACHE_BYTES:
        return
    with _cache_lock:
        replaced = _cached.pop(key, None)
        _cached[key] = encoded
        _cached_bytes += len(encoded) - (0 if replaced is None else len(replaced))
        while _cached_bytes > CACHE_BYTES:
            _, dropped = _cached.popitem(last=False)
            _cached_bytes -= len(dropped)
