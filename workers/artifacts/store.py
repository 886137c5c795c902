"""The artifact store: where artifacts' bytes live, out of band, in a directory or an S3-compatible
object store, through fsspec (s3fs for `s3://`).

Each artifact is two objects under the store's root: `<id>`, its bytes, and `<id>.json`, its record
(the reference, who made it, when). The record is written after the bytes and removed before them,
so an artifact whose record can be read is whole. `TOOLFLEET_ARTIFACT_URL` chooses the store:
`file:///srv/artifacts` (or a plain path), `s3://bucket/prefix` (credentials, region and endpoint from
the usual `AWS_*` variables, or `?endpoint_url=…` for an S3-compatible server).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import IO, Any
from urllib.parse import parse_qsl, urlsplit

from workers.artifacts._values import CHUNK_BYTES, Artifact, ArtifactRef, artifact_id_of
from workers.errors import ArtifactNotFoundError, SettingsError

__all__ = ["DEFAULT_ARTIFACT_DIRECTORY", "ArtifactRecord", "ArtifactStore", "store_for"]

DEFAULT_ARTIFACT_DIRECTORY = "toolfleet-artifacts"  # under the working directory, when no URL is set
_S3_PART_BYTES = 5 << 20  # S3's smallest multipart part: what a write holds in memory at most
_HEAD_BYTES = 8 << 10  # the first bytes `put` keeps for a preview


@dataclass(frozen=True)
class ArtifactRecord:
    """An artifact's record in the store: its reference and who made it, when."""

    ref: ArtifactRef
    created_at: float
    invocation_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    tenant: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ref"] = self.ref.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArtifactRecord:
        return cls(
            ref=ArtifactRef.from_json(data["ref"]),
            created_at=float(data["created_at"]),
            invocation_id=data.get("invocation_id"),
            call_id=data.get("call_id"),
            tool=data.get("tool"),
            tenant=data.get("tenant"),
        )


class ArtifactStore:
    """Artifacts' bytes and records under one root of an fsspec filesystem."""

    def __init__(self, fs: Any, root: str, url: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        self._write_options: dict[str, Any] = {}
        if self.is_s3:
            self._write_options["block_size"] = _S3_PART_BYTES

    @classmethod
    def from_url(cls, url: str) -> ArtifactStore:
        """The store `url` names: `file:///path`, a plain path, `s3://bucket/prefix`, or `memory://name`."""
        import fsspec  # imported by the processes that store or read artifacts only

        text = url.strip() or DEFAULT_ARTIFACT_DIRECTORY
        parts = urlsplit(text)
        if parts.scheme in ("", "file"):
            path = os.path.abspath(parts.path if parts.scheme else text)
            return cls(fsspec.filesystem("file", auto_mkdir=True), path, f"file://{path}")
        if parts.scheme in ("s3", "s3a"):
            if not parts.netloc:
                raise SettingsError(f"TOOLFLEET_ARTIFACT_URL={url!r} names no bucket: use s3://bucket/prefix")
            options = dict(parse_qsl(parts.query))
            # no listings cache: an artifact another process writes after a listing must be seen
            storage: dict[str, Any] = {"use_listings_cache": False}
            if "endpoint_url" in options:
                storage["endpoint_url"] = options["endpoint_url"]
            if "region" in options:
                storage["client_kwargs"] = {"region_name": options["region"]}
            try:
                fs = fsspec.filesystem("s3", **storage)
            except ImportError:
                raise SettingsError(
                    "an s3:// artifact store needs s3fs: pip install 'toolfleet[s3]'"
                ) from None
            root = f"{parts.netloc}{parts.path}".rstrip("/")
            return cls(fs, root, f"s3://{root}")
        if parts.scheme == "memory":
            return cls(fsspec.filesystem("memory"), f"/{parts.netloc}{parts.path}", text)
        raise SettingsError(
            f"TOOLFLEET_ARTIFACT_URL={url!r} is not an artifact store: use file:///path or s3://bucket/prefix"
        )

    @property
    def is_s3(self) -> bool:
        return self.url.startswith("s3://")

    def _key(self, artifact_id: str) -> str:
        return f"{self.root}/{artifact_id}"

    def uri_of(self, artifact_id: str) -> str:
        return f"{self.url.split('?', 1)[0].rstrip('/')}/{artifact_id}"

    def put(
        self,
        artifact: Artifact,
        *,
        invocation_id: str | None = None,
        call_id: str | None = None,
        tool: str | None = None,
        tenant: str | None = None,
    ) -> tuple[ArtifactRecord, bytes]:
        """Write `artifact`'s bytes in chunks, hashing them on the way, then its record; returns the
        record and the first bytes (for a preview). A failed write leaves no record."""
        artifact_id = uuid.uuid4().hex
        digest, size, head = hashlib.sha256(), 0, bytearray()
        out = self.fs.open(self._key(artifact_id), "wb", **self._write_options)
        try:
            for chunk in artifact.chunks():
                digest.update(chunk)
                size += len(chunk)
                if len(head) < _HEAD_BYTES:
                    head += chunk[: _HEAD_BYTES - len(head)]
                out.write(chunk)
        except BaseException:
            self._discard(out, artifact_id)
            raise
        out.close()
        ref = ArtifactRef(
            id=artifact_id,
            name=artifact.name,
            media_type=artifact.media_type,
            size=size,
            sha256=digest.hexdigest(),
            uri=self.uri_of(artifact_id),
        )
        record = ArtifactRecord(ref, time.time(), invocation_id, call_id, tool, tenant)
        self.fs.pipe_file(self._key(artifact_id) + ".json", json.dumps(record.to_json()).encode())
        return record, bytes(head)

    def _discard(self, out: Any, artifact_id: str) -> None:
        """Drop a write cut short: an upload aborted, whatever reached the store removed."""
        with contextlib.suppress(Exception):
            if hasattr(out, "discard"):
                out.discard()  # an S3 multipart upload, aborted: nothing is committed
                out.closed = True  # (else its finalizer would try to complete it)
            else:
                out.close()
        with contextlib.suppress(Exception):
            self.fs.rm_file(self._key(artifact_id))

    def record(self, artifact: str) -> ArtifactRecord:
        """The record of the artifact `artifact` names (`artifact:<id>` or an id): `ArtifactNotFoundError`
        when there is none (never made, removed, or not an id at all)."""
        artifact_id = artifact_id_of(artifact)
        if artifact_id is None:
            raise ArtifactNotFoundError(
                f"{artifact!r} is not an artifact reference (artifact:<32 hex digits>)"
            )
        try:
            raw = self.fs.cat_file(self._key(artifact_id) + ".json")
        except FileNotFoundError:
            raise ArtifactNotFoundError.missing(artifact_id) from None
        return ArtifactRecord.from_json(json.loads(raw))

    def open(self, artifact_id: str) -> IO[bytes]:
        """A binary file object reading the artifact's bytes from the store a block at a time."""
        try:
            return self.fs.open(self._key(artifact_id), "rb", block_size=CHUNK_BYTES)  # type: ignore[no-any-return]
        except FileNotFoundError:
            raise ArtifactNotFoundError.missing(artifact_id) from None

    def head(self, artifact_id: str, size: int) -> bytes:
        """The artifact's first `size` bytes (all of it when shorter), read alone: a preview."""
        try:
            return bytes(self.fs.cat_file(self._key(artifact_id), start=0, end=size))
        except FileNotFoundError:
            raise ArtifactNotFoundError.missing(artifact_id) from None

    def chunks(self, artifact_id: str, size: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The artifact's bytes, `size` at a time."""
        with self.open(artifact_id) as file:
            while chunk := file.read(size):
                yield chunk

    def delete(self, artifact_id: str) -> bool:
        """Remove the artifact (its record first): whether there was one (an object store deletes a
        missing key without a word, so whether it is there is asked first)."""
        existed = False
        for key in (self._key(artifact_id) + ".json", self._key(artifact_id)):
            if not self.fs.exists(key):
                continue
            existed = True
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(key)
        return existed

    def records(self) -> Iterator[ArtifactRecord]:
        """Every artifact's record (unreadable ones skipped)."""
        for key in self._listing():
            if key.endswith(".json"):
                try:
                    yield ArtifactRecord.from_json(json.loads(self.fs.cat_file(key)))
                except (FileNotFoundError, ValueError, KeyError, TypeError):
                    continue

    def unrecorded(self, older_than: float) -> dict[str, int]:
        """Bytes without a record, last written before `older_than` (a write cut short): their sizes
        by id, as the listing gives them."""
        listing = self._listing(detail=True)
        names = {key.rsplit("/", 1)[-1] for key in listing}
        found: dict[str, int] = {}
        for key, info in listing.items():
            name = key.rsplit("/", 1)[-1]
            if artifact_id_of(name) is None or f"{name}.json" in names:
                continue
            if _modified(info) < older_than:
                found[name] = int(info.get("size") or 0)
        return found

    def presign(self, artifact_id: str, expires_s: int) -> str | None:
        """A URL that reads the artifact without credentials for `expires_s`; None for a directory."""
        if not self.is_s3:
            return None
        return str(self.fs.sign(self._key(artifact_id), expiration=expires_s))

    def _listing(self, detail: bool = False) -> Any:
        try:
            return self.fs.find(self.root, detail=detail)
        except FileNotFoundError:
            return {} if detail else []


def _modified(info: dict[str, Any]) -> float:
    """When a listed object was last written, in seconds since the epoch (0 when unknown)."""
    value = info.get("mtime", info.get("LastModified", info.get("created")))
    if value is None:
        return 0.0
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


_STORES: dict[str, ArtifactStore] = {}
_STORES_LOCK = threading.Lock()


def store_for(url: str) -> ArtifactStore:
    """The store `url` names, made once per process (per URL) and shared by its threads."""
    with _STORES_LOCK:
        store = _STORES.get(url)
        if store is None:
            store = _STORES[url] = ArtifactStore.from_url(url)
        return store
