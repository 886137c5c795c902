"""The artifacts of an invocation's calls, as its page shows them: each call's artifacts (the references
in its journaled result object) with their name, type and size, a link to their bytes, an image's
picture and a text's beginning.

A text's beginning is read from the store as its first bytes alone, never the whole; at most
`MAX_READ` artifacts of a page are read from the store (the rest are listed, as the journal tells
them). An artifact another tenant's, or removed from the store, is listed without its link.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response

from orchestrator.saga.journal import CallRecord
from orchestrator.server.artifacts import download, readable_record
from orchestrator.server.tenants import Viewer
from orchestrator.server.ui.context import UiContext
from workers.artifacts import PREVIEW_CHARS, ArtifactRef, ArtifactStore, refs_in, size_text, store_for
from workers.errors import ArtifactNotFoundError, ToolfleetError

__all__ = ["MAX_READ", "ArtifactView", "artifact_views", "served"]

log = logging.getLogger(__name__)

MAX_READ = 50  # artifacts of one page whose record (and text's beginning) are read from the store
_PREVIEW_BYTES = PREVIEW_CHARS * 4  # enough for PREVIEW_CHARS characters of UTF-8, whatever they are


@dataclass(frozen=True)
class ArtifactView:
    """One artifact of a call on its invocation's page."""

    ref: ArtifactRef
    # `ready`: linked (an image shown, a text's beginning); `unknown`: not read from the store (past
    # the page's limit), linked; `gone`: removed, or not this viewer's; `unreadable`: the store failed
    state: str
    preview: str | None = None  # a text's first PREVIEW_CHARS characters
    cut: bool = False  # whether the text goes on past its preview

    @property
    def url(self) -> str:
        return f"/ui/artifacts/{self.ref.id}"

    @property
    def linked(self) -> bool:
        return self.state in ("ready", "unknown")

    @property
    def size(self) -> str:
        return size_text(self.ref.size)


async def artifact_views(
    context: UiContext, viewer: Viewer, calls: list[CallRecord]
) -> dict[int, list[ArtifactView]]:
    """Each call's artifacts (by the call's journal row), read from the store in a thread."""
    found = {call.id: refs for call in calls if (refs := refs_in(call.result_object))}
    if not found:
        return {}
    return await asyncio.to_thread(_views, context.settings.artifact_url, viewer, found)


def _views(url: str, viewer: Viewer, found: dict[int, list[ArtifactRef]]) -> dict[int, list[ArtifactView]]:
    try:
        store: ArtifactStore | None = store_for(url)
    except ToolfleetError as exc:  # a URL naming no store: the artifacts are listed, none read
        log.warning("the run view cannot open the artifact store: %s", exc)
        store = None
    budget = MAX_READ
    views: dict[int, list[ArtifactView]] = {}
    for row, refs in found.items():
        views[row] = []
        for ref in refs:
            if store is None:
                views[row].append(ArtifactView(ref, "unreadable"))
            elif budget <= 0:
                views[row].append(ArtifactView(ref, "unknown"))
            else:
                budget -= 1
                views[row].append(_view(store, ref, viewer))
    return views


def _view(store: ArtifactStore, ref: ArtifactRef, viewer: Viewer) -> ArtifactView:
    """`ref` as the store has it: whether it is there and this viewer's, and a text's beginning."""
    try:
        record = store.record(ref.id)
        if not viewer.sees(record.tenant):
            return ArtifactView(ref, "gone")
        if not record.ref.is_text:
            return ArtifactView(record.ref, "ready")
        head = store.head(ref.id, _PREVIEW_BYTES)
    except (ArtifactNotFoundError, FileNotFoundError):
        return ArtifactView(ref, "gone")
    except (OSError, ValueError) as exc:
        log.warning("the run view could not read artifact %s: %s", ref.id, exc)
        return ArtifactView(ref, "unreadable")
    text = bytes(head).decode("utf-8", "ignore")  # a character cut at the end is dropped
    preview = text[:PREVIEW_CHARS]
    cut = len(head) < record.ref.size or len(text) > PREVIEW_CHARS
    return ArtifactView(record.ref, "ready", preview, cut)


async def served(request: Request, context: UiContext, viewer: Viewer, artifact_id: str) -> Response | None:
    """The artifact's bytes for the view (an image's `<img>`, a link), streamed as the API streams
    them; None when there is no such artifact for `viewer` (another tenant's is none)."""
    store = store_for(context.settings.artifact_url)
    record = await readable_record(store, artifact_id, viewer)
    return None if record is None else await download(store, record, request.method)
