"""Artifacts as a tool's arguments: the model passes a reference (`artifact:<id>`), the tool receives
the stored `Artifact`, read from the store by the worker that runs it, in chunks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from workers.artifacts._results import ArtifactSink
from workers.artifacts._values import Artifact, artifact_id_of
from workers.errors import ArtifactNotFoundError, ToolArgumentsError
from workers.tenants import DEFAULT_TENANT

__all__ = ["ARGUMENT_SCHEMA", "artifact_argument", "reading_artifacts"]

ARGUMENT_SCHEMA = {
    "type": "string",
    "description": "an artifact's reference, `artifact:<id>`, as an earlier tool's result gave it",
}

_READER: ContextVar[str | None] = ContextVar("toolfleet_artifact_reader", default=None)


@contextlib.contextmanager
def reading_artifacts(tenant: str) -> Iterator[None]:
    """Bind a call's arguments for `tenant`: it reads only its own tenant's artifacts."""
    token = _READER.set(tenant)
    try:
        yield
    finally:
        _READER.reset(token)


def artifact_argument(value: Any, path: str) -> Artifact:
    """The stored artifact an argument names; `ToolArgumentsError` when it names none the call may read
    (another tenant's reads as missing: it is not told apart). An artifact recorded with no tenant (a
    call made outside any invocation) is the default tenant's, as such a call's own arguments are."""
    artifact_id = artifact_id_of(value)
    if artifact_id is None:
        raise ToolArgumentsError(f'Argument "{path}" is not an artifact reference (artifact:<id>): <{value}>')
    store = ArtifactSink.from_env().store
    try:
        record = store.record(artifact_id)
    except ArtifactNotFoundError:
        record = None
    except OSError as exc:
        raise ToolArgumentsError(
            f'Argument "{path}": artifact {artifact_id} could not be read: {exc}'
        ) from exc
    tenant = _READER.get()
    if record is None or (tenant is not None and (record.tenant or DEFAULT_TENANT) != tenant):
        raise ToolArgumentsError(f'Argument "{path}": {ArtifactNotFoundError.missing(artifact_id)}')
    return Artifact.stored(record.ref, store)
