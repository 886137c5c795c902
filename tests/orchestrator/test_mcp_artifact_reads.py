"""`resources/read` of the MCP gateway on an artifact's link, in-process on a directory store: text as
text, other bytes as base64, one over `MAX_READ_BYTES` refused with where to fetch it, and a URI that
names no artifact refused. (Reading over HTTP, with tenants, is in the gateway's integration tests.)"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from orchestrator.integrations import mcp_server
from orchestrator.integrations.mcp_server import FleetMcpServer
from workers.artifacts import Artifact, ArtifactStore


class _Context:
    """A request context of a stdio client: no HTTP request, so no tenant."""

    request = None


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    url = (tmp_path / "artifacts").as_uri()
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", url)
    return ArtifactStore.from_url(url)


def _read(uri: str) -> Any:
    server = FleetMcpServer(fleet=None)  # type: ignore[arg-type]  # reading touches no fleet
    params = types.ReadResourceRequestParams(uri=uri)
    try:
        return asyncio.run(server._read_resource(_Context(), params))  # type: ignore[arg-type]
    except MCPError as exc:
        return exc


def test_text_is_read_as_text_and_bytes_as_base64(store: ArtifactStore) -> None:
    text, _ = store.put(Artifact("a,b\n1,2\n", name="t.csv", media_type="text/csv"))
    raw, _ = store.put(Artifact(b"\x89PNG\x00\xff", name="p.png"))

    [as_text] = _read(text.ref.ref).contents
    [as_blob] = _read(raw.ref.ref).contents

    assert isinstance(as_text, types.TextResourceContents) and as_text.text == "a,b\n1,2\n"
    assert isinstance(as_blob, types.BlobResourceContents)
    assert (base64.b64decode(as_blob.blob), as_blob.mime_type) == (b"\x89PNG\x00\xff", "image/png")


def test_an_artifact_over_the_limit_is_refused_with_where_to_fetch_it(
    store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_server, "MAX_READ_BYTES", 7)
    record, _ = store.put(Artifact(b"12345678", name="eight.bin"))

    refused = _read(record.ref.ref)

    assert isinstance(refused, MCPError) and refused.code == types.INVALID_PARAMS
    assert refused.message == (
        f"{record.ref.ref} is 8 bytes, over the 7 this server reads: "
        f"fetch it from GET /v1/artifacts/{record.ref.id} of toolfleet serve"
    )


@pytest.mark.parametrize("uri", ["file:///etc/passwd", "artifact:../../x", "artifact:" + "0" * 32])
def test_a_uri_of_no_artifact_is_not_found(store: ArtifactStore, uri: str) -> None:
    refused = _read(uri)
    assert isinstance(refused, MCPError) and refused.code == -32002
