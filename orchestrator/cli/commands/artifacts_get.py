"""`toolfleet artifacts get REF`: an artifact from the store to a file (or stdout), in chunks, its
SHA-256 checked against its record as it is written. An operator's way to an artifact, beside the
service's `GET /v1/artifacts/{id}`: it reads the store itself (TOOLFLEET_ARTIFACT_URL), any tenant's."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
from pathlib import Path
from typing import IO, Any

from orchestrator.cli.commands._command import refuse
from workers.artifacts import ArtifactStore, size_text, store_for
from workers.errors import ArtifactNotFoundError, SettingsError
from workers.settings import Settings

__all__ = ["add_get", "get", "safe_file_name"]

GET_HELP = "write an artifact from the store to a file (its own name by default) or to stdout (-o -)"


def add_get(actions: Any) -> None:
    get_parser = actions.add_parser(
        "get", help=GET_HELP, description=GET_HELP[0].upper() + GET_HELP[1:] + "."
    )
    get_parser.add_argument("reference", metavar="REF", help="the artifact: artifact:<id>, or its id")
    get_parser.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where to write it (`-`: stdout); default: its name in this directory, never overwritten",
    )


def safe_file_name(name: str) -> str:
    """An artifact's name as a file name in this directory: its last part, no control characters,
    never empty, `.` or `..` (a tool names its artifacts; the name must not pick the path)."""
    base = os.path.basename(name.replace("\\", "/"))
    cleaned = "".join(c if c.isprintable() else "_" for c in base).strip()
    return cleaned if cleaned not in ("", ".", "..") else "artifact"


def get(args: argparse.Namespace, settings: Settings) -> int:
    command = "artifacts get"
    try:
        store = store_for(settings.artifact_url)
        record = store.record(args.reference)
    except (SettingsError, ArtifactNotFoundError) as exc:
        return refuse(command, exc)
    ref = record.ref
    if args.output == "-":
        return _copied(store, ref.id, ref.sha256, sys.stdout.buffer, None, command)
    target = Path(args.output) if args.output else Path(safe_file_name(ref.name))
    mode = "wb" if args.output else "xb"  # under its own name, never over another file
    try:
        with open(target, mode) as file:
            status = _copied(store, ref.id, ref.sha256, file, target, command)
    except FileExistsError:
        return refuse(command, FileExistsError(f"{target} exists: give -o PATH to write it elsewhere"))
    except OSError as exc:
        return refuse(command, exc)
    if status == 0:
        print(
            f"{target}: {ref.name} ({ref.media_type}, {size_text(ref.size)}), SHA-256 {ref.sha256}",
            file=sys.stderr,
        )
    return status


def _copied(
    store: ArtifactStore, artifact_id: str, sha256: str, out: IO[bytes], target: Path | None, command: str
) -> int:
    """Copy the bytes to `out`; 1 (and `target` removed) when they are not the record's."""
    digest = hashlib.sha256()
    try:
        for chunk in store.chunks(artifact_id):
            digest.update(chunk)
            out.write(chunk)
        out.flush()
    except (ArtifactNotFoundError, OSError) as exc:
        _discard(target)
        return refuse(command, exc)
    if digest.hexdigest() != sha256:
        _discard(target)
        print(
            f"toolfleet {command}: artifact {artifact_id}'s bytes are not those its record names "
            f"(SHA-256 {digest.hexdigest()}, not {sha256})",
            file=sys.stderr,
        )
        return 1
    return 0


def _discard(target: Path | None) -> None:
    if target is not None:
        with contextlib.suppress(OSError):
            target.unlink()
