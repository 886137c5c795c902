"""Artifacts as values: what a tool returns or takes (`Artifact`) and what travels instead of its bytes
(`ArtifactRef`): the reference a result, the journal, Flower and the model carry."""

from __future__ import annotations

import mimetypes
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol

__all__ = ["CHUNK_BYTES", "REF_PREFIX", "Artifact", "ArtifactRef", "artifact_id_of", "is_ref", "refs_in"]

CHUNK_BYTES = 1 << 20  # what is read or written at once: an artifact's memory in any process
REF_PREFIX = "artifact:"  # an artifact's reference as text: `artifact:<id>`, what the model passes on
_ID = re.compile(r"[0-9a-f]{32}")
_DEFAULT_MEDIA_TYPE = "application/octet-stream"


def artifact_id_of(value: Any) -> str | None:
    """The id in `artifact:<id>`, a bare id, or a reference's JSON (`{"ref": …}`, `{"id": …}`); None
    for anything else."""
    if isinstance(value, dict):
        value = value.get("ref") or value.get("id")
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.startswith(REF_PREFIX):
        text = text[len(REF_PREFIX) :]
    return text if _ID.fullmatch(text) else None


@dataclass(frozen=True)
class ArtifactRef:
    """A stored artifact: its id, name, media type, size in bytes, SHA-256 (hex) and URI in the store."""

    id: str
    name: str
    media_type: str
    size: int
    sha256: str
    uri: str

    @property
    def ref(self) -> str:
        """The reference as text, `artifact:<id>`: what a later tool takes as an `Artifact` argument."""
        return f"{REF_PREFIX}{self.id}"

    @property
    def is_text(self) -> bool:
        return is_text_type(self.media_type)

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")

    def to_json(self) -> dict[str, Any]:
        """The reference as results carry it; `type` marks it wherever it sits in a result."""
        return {
            "type": "artifact",
            "ref": self.ref,
            "name": self.name,
            "media_type": self.media_type,
            "size": self.size,
            "sha256": self.sha256,
            "uri": self.uri,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArtifactRef:
        identifier = artifact_id_of(data)
        if identifier is None:
            raise ValueError(f"not an artifact reference: {data!r}")
        return cls(
            id=identifier,
            name=str(data.get("name") or identifier),
            media_type=str(data.get("media_type") or _DEFAULT_MEDIA_TYPE),
            size=int(data.get("size") or 0),
            sha256=str(data.get("sha256") or ""),
            uri=str(data.get("uri") or ""),
        )


def is_ref(node: Any) -> bool:
    """Whether a JSON node is an artifact's reference as results carry it (`ArtifactRef.to_json`)."""
    return isinstance(node, dict) and node.get("type") == "artifact" and artifact_id_of(node) is not None


def refs_in(tree: Any, *, text: str | None = None) -> list[ArtifactRef]:
    """The artifact references in a JSON tree (a result object), in order, each once. With `text`, the
    result's text (which names each of its artifacts, `artifact:<id>`): none when it names none, the
    tree not walked (a large result object takes milliseconds to walk; its text, microseconds to
    search)."""
    if text is not None and REF_PREFIX not in text:
        return []
    found: dict[str, ArtifactRef] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        if is_ref(node):
            ref = ArtifactRef.from_json(node)
            found.setdefault(ref.id, ref)
        elif isinstance(node, dict):
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return list(found.values())


def is_text_type(media_type: str) -> bool:
    """Whether a media type is text a model can read: `text/*`, JSON, XML, YAML, CSV and kin."""
    kind = media_type.split(";", 1)[0].strip().lower()
    return kind.startswith("text/") or kind.endswith(("+json", "+xml")) or kind in _TEXT_TYPES


_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/yaml", "application/x-yaml", "application/x-ndjson"}
)


class _Store(Protocol):
    """What an artifact reads its stored bytes through (`ArtifactStore`)."""

    def open(self, artifact_id: str) -> IO[bytes]: ...

    def chunks(self, artifact_id: str, size: int = ...) -> Iterator[bytes]: ...


class Artifact:
    """A file a tool produces or takes, whose bytes travel out of band, through the artifact store.

    A tool returns one (alone, in a list, or anywhere inside its result) made from `data` (bytes or
    text), a `path` on the worker, or a `stream` (a binary file object or an iterable of bytes): the
    worker writes it to the store in chunks, and the result carries its `ArtifactRef`. A tool taking
    an `Artifact` parameter receives a stored one (the model passes its `artifact:<id>` reference),
    read with `open()`, `chunks()`, `read_bytes()`, `read_text()` or `save(path)`: the worker fetches
    it from the store, in chunks.

    `name` defaults to the path's file name; `media_type` to what the name's extension says, else
    `application/octet-stream` (`text/plain; charset=utf-8` for text given as `str`).
    """

    def __init__(
        self,
        data: bytes | str | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        stream: IO[bytes] | Iterable[bytes] | None = None,
        name: str | None = None,
        media_type: str | None = None,
    ) -> None:
        if sum(source is not None for source in (data, path, stream)) != 1:
            raise ValueError("Artifact needs exactly one of data, path or stream")
        if path is not None:
            name = name or os.path.basename(os.fspath(path))
        if not name:
            raise ValueError("Artifact needs a name when it is not made from a path")
        if isinstance(data, str):
            media_type = media_type or "text/plain; charset=utf-8"
            data = data.encode("utf-8")
        self.name = name
        self.media_type = media_type or mimetypes.guess_type(name)[0] or _DEFAULT_MEDIA_TYPE
        self._data = data
        self._path = None if path is None else os.fspath(path)
        self._stream = stream
        self._ref: ArtifactRef | None = None
        self._store: _Store | None = None

    @classmethod
    def stored(cls, ref: ArtifactRef, store: _Store) -> Artifact:
        """The artifact `ref` names in `store`: what a tool's `Artifact` parameter receives."""
        artifact = cls(b"", name=ref.name, media_type=ref.media_type)
        artifact._data = None
        artifact._ref, artifact._store = ref, store
        return artifact

    @property
    def ref(self) -> ArtifactRef | None:
        """The stored artifact's reference; None before it is stored."""
        return self._ref

    @property
    def size(self) -> int | None:
        if self._ref is not None:
            return self._ref.size
        if self._data is not None:
            return len(self._data)
        if self._path is not None:
            return os.path.getsize(self._path)
        return None

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The bytes, `size` at a time (a stream given as an iterable: its own pieces), read once for a
        stream, from the store for a stored artifact."""
        if self._ref is not None and self._store is not None:
            yield from self._store.chunks(self._ref.id, size)
        elif self._data is not None:
            view = memoryview(self._data)
            for start in range(0, len(view), size):
                yield bytes(view[start : start + size])
        elif self._path is not None:
            with open(self._path, "rb") as file:
                while chunk := file.read(size):
                    yield chunk
        elif hasattr(self._stream, "read"):
            while chunk := self._stream.read(size):  # type: ignore[union-attr]
                yield bytes(chunk)
        else:
            for chunk in self._stream or ():
                if chunk:
                    yield bytes(chunk)

    def open(self) -> IO[bytes]:
        """A binary file object over the bytes (streamed from the store for a stored artifact)."""
        if self._ref is not None and self._store is not None:
            return self._store.open(self._ref.id)
        if self._path is not None:
            return open(self._path, "rb")
        raise ValueError("only a stored artifact or one made from a path can be opened; use chunks()")

    def read_bytes(self) -> bytes:
        """All the bytes at once: for small artifacts; prefer `chunks()` or `save()` for large ones."""
        return b"".join(self.chunks())

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the bytes to `path` on this machine in chunks; returns the path."""
        target = os.fspath(path)
        with open(target, "wb") as file:
            for chunk in self.chunks():
                file.write(chunk)
        return target

    def __repr__(self) -> str:
        where = self._ref.ref if self._ref is not None else "unstored"
        return f"Artifact({self.name!r}, {self.media_type!r}, {where})"
