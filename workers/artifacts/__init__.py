"""Artifacts: files and large results whose bytes travel out of band, through the artifact store,
while results, the journal, Flower and the model carry their references."""

from workers.artifacts._results import (
    DEFAULT_INLINE_RESULT_BYTES,
    PREVIEW_CHARS,
    ArtifactSink,
    ArtifactWriter,
    describe,
    size_text,
    stored_contents,
    stored_ref,
    writing_artifacts,
)
from workers.artifacts._values import (
    CHUNK_BYTES,
    REF_PREFIX,
    Artifact,
    ArtifactRef,
    artifact_id_of,
    is_ref,
    refs_in,
)
from workers.artifacts.lifecycle import delete_artifacts
from workers.artifacts.store import ArtifactRecord, ArtifactStore, store_for

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_INLINE_RESULT_BYTES",
    "PREVIEW_CHARS",
    "REF_PREFIX",
    "Artifact",
    "ArtifactRecord",
    "ArtifactRef",
    "ArtifactSink",
    "ArtifactStore",
    "ArtifactWriter",
    "artifact_id_of",
    "delete_artifacts",
    "describe",
    "is_ref",
    "refs_in",
    "size_text",
    "store_for",
    "stored_contents",
    "stored_ref",
    "writing_artifacts",
]
