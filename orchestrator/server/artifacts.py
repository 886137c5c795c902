"""Artifacts over HTTP: `GET /v1/artifacts/{id}` streams an artifact's bytes from the artifact store,
`GET /v1/artifacts/{id}/link` says where to fetch them (a presigned URL of an S3 store, good for 15
minutes; this route's own URL for a directory).

An artifact is its invocation's tenant's: another tenant is answered as for an artifact that does not
exist (404, the same body), an operator (the `admin` scope, or a service without keys) reads every
one. The bytes are streamed a chunk (1 MiB) at a time, never held whole; they are sent as a download
(`Content-Disposition: attachment`), under a policy that runs nothing, whatever their media type says.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import IO, Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from orchestrator.errors import ApiError
from orchestrator.server.tenants import Viewer
from orchestrator.server.visibility import viewer_of
from workers.artifacts import CHUNK_BYTES, ArtifactRecord, ArtifactStore, artifact_id_of, store_for
from workers.errors import ArtifactNotFoundError
from workers.settings import Settings

__all__ = [
    "LINK_TTL_S",
    "NOT_FOUND",
    "artifact_store",
    "disposition",
    "download",
    "install",
    "readable_record",
    "router",
    "safe_media_type",
]

router = APIRouter()

LINK_TTL_S = 15 * 60  # how long a presigned link reads the artifact
NOT_FOUND = "artifact_not_found"
_STORE = "toolfleet_artifact_store"  # the application's store, on its state
_OCTETS = "application/octet-stream"
_TOKEN = r"[A-Za-z0-9!#$&^_.+-]+"
_MEDIA_TYPE = re.compile(rf'{_TOKEN}/{_TOKEN}(\s*;\s*{_TOKEN}=({_TOKEN}|"[^"\\\x00-\x1f\x7f]*"))*')
# What a browser opening the bytes may do with them: nothing (no script, no style, no frame, sandboxed).
_DOWNLOAD_POLICY = "default-src 'none'; sandbox"


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the artifact routes on `app`, reading the store `settings.artifact_url` names (opened
    once, here: a URL that names no store stops the service at start)."""
    setattr(app.state, _STORE, store_for(settings.artifact_url))
    app.include_router(router)


def artifact_store(request: Request) -> ArtifactStore:
    store: ArtifactStore = getattr(request.app.state, _STORE)
    return store


async def readable_record(store: ArtifactStore, artifact_id: str, viewer: Viewer) -> ArtifactRecord | None:
    """The record of the artifact `artifact_id` names (an id or `artifact:<id>`), if `viewer` may
    read it; None when it does not exist, was removed, or is another tenant's."""
    try:
        record = await asyncio.to_thread(store.record, artifact_id)
    except ArtifactNotFoundError:
        return None
    return record if viewer.sees(record.tenant) else None


async def download(store: ArtifactStore, record: ArtifactRecord, method: str) -> Response | None:
    """The artifact's bytes as a download, streamed from the store a chunk at a time (only its
    headers for HEAD); None when its bytes are gone (removed since its record was read). The bytes are
    opened before the answer starts: a removal while they stream cannot cut a 200 short."""
    ref = record.ref
    headers = {
        "Content-Type": safe_media_type(ref.media_type),
        "Content-Length": str(ref.size),
        "Content-Disposition": disposition(ref.name),
        "ETag": f'"{ref.sha256}"',
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": _DOWNLOAD_POLICY,
        "Cache-Control": "private, no-cache",
    }
    if method == "HEAD":
        return Response(headers=headers)
    try:
        opened = await asyncio.to_thread(store.open, ref.id)
    except ArtifactNotFoundError:
        return None
    return StreamingResponse(_chunks(opened), headers=headers)


def _chunks(opened: IO[bytes]) -> Iterator[bytes]:
    """The bytes of an opened artifact, a chunk at a time; closed when done (or the client left)."""
    with opened:
        while chunk := opened.read(CHUNK_BYTES):
            yield chunk


def safe_media_type(media_type: str) -> str:
    """`media_type` if it is one a header may carry (`type/subtype; param=value`), else
    `application/octet-stream`: a tool names its artifacts' types, and a header is no place for
    whatever it wrote."""
    text = media_type.strip()
    return text if _MEDIA_TYPE.fullmatch(text) else _OCTETS


def disposition(name: str) -> str:
    """`attachment` with the artifact's name: quoted plainly for old clients (any character outside
    printable ASCII, `"` and `\\` as `_`), and whole as RFC 6266's UTF-8 `filename*`."""
    name = name or "artifact"
    plain = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in name)
    encoded = quote(name.encode("utf-8", "replace"), safe="")
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{encoded}"


async def _found(request: Request, given: str) -> ArtifactRecord:
    """The record `given` names, readable by the request's key; else 404 (the same for another
    tenant's as for one that never was)."""
    artifact_id = artifact_id_of(given)
    if artifact_id is None:
        raise ApiError(
            404,
            f"{given!r} is not an artifact id: give the 32 hex digits of `artifact:<id>`, or all of it",
            code=NOT_FOUND,
        )
    record = await readable_record(artifact_store(request), artifact_id, viewer_of(request))
    if record is None:
        raise ApiError(404, str(ArtifactNotFoundError.missing(artifact_id)), code=NOT_FOUND)
    return record


@router.api_route("/v1/artifacts/{artifact_id}", methods=["GET", "HEAD"], response_model=None)
async def artifact_bytes(artifact_id: str, request: Request) -> Response:
    """The artifact's bytes (`artifact_id`: its id, or `artifact:<id>`), streamed, as a download."""
    record = await _found(request, artifact_id)
    response = await download(artifact_store(request), record, request.method)
    if response is None:
        raise ApiError(404, str(ArtifactNotFoundError.missing(record.ref.id)), code=NOT_FOUND)
    return response


@router.get("/v1/artifacts/{artifact_id}/link", response_model=None)
async def artifact_link(artifact_id: str, request: Request) -> Response:
    """Where to fetch the artifact: a presigned URL of an S3 store (good for 15 minutes, read with
    no key), or, for a directory, `GET /v1/artifacts/{id}` of this service (`expires_at` null)."""
    record = await _found(request, artifact_id)
    ref = record.ref
    # before signing, in whole seconds: the link lasts at least until `expires_at`
    signed_at = datetime.now(UTC).replace(microsecond=0)
    url = await asyncio.to_thread(artifact_store(request).presign, ref.id, LINK_TTL_S)
    expires_at: str | None = None
    if url is None:
        url = str(request.url_for("artifact_bytes", artifact_id=ref.id))
    else:
        expires_at = (signed_at + timedelta(seconds=LINK_TTL_S)).isoformat()
    body: dict[str, Any] = {
        "id": ref.id,
        "ref": ref.ref,
        "name": ref.name,
        "media_type": ref.media_type,
        "size": ref.size,
        "sha256": ref.sha256,
        "url": url,
        "expires_at": expires_at,
    }
    return JSONResponse(body, headers={"Cache-Control": "no-store"})
