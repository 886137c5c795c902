"""A tool's version: a short digest of what the model is given and of the options that change how a call
runs, so that during a rolling deploy a call reaches only workers that serve the tool as it was defined.

The digest hashes canonical JSON (sorted keys, no spaces) of the tool's specification (name,
description, parameters, metadata) and its options (pool, timeout, retries, idempotent, retry_on,
heartbeat, approval, concurrency and rate limits, return and search behavior, whether it has a
compensation): `DIGEST_HEX` hex digits of its SHA-256. A worker started with a build id
(`toolfleet worker --build-id B`, `TOOLFLEET_BUILD_ID`) advertises `<digest>+<build id>`, so that a
change of code that leaves the schema alone is a version of its own. A wanted version without a build
id matches every build of the same digest; one naming a build matches that build only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any, Protocol

from workers.tools._decorators import ToolOptions
from workers.tools.specification import ToolSpecification

__all__ = [
    "BUILD_SEPARATOR",
    "DIGEST_HEX",
    "VersionedTool",
    "build_queue",
    "check_build_id",
    "tool_digest",
    "tool_version",
    "version_build",
    "version_digest",
    "version_matches",
]

DIGEST_HEX = 12
BUILD_SEPARATOR = "+"
QUEUE_SEPARATOR = "@"  # `<pool>@<build digest>`: the queue of the workers of one build of a pool
_BUILD_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class VersionedTool(Protocol):
    """What a version is made of: a `ToolDefinition` (named here without importing it)."""

    @property
    def specification(self) -> ToolSpecification: ...

    @property
    def options(self) -> ToolOptions: ...

    @property
    def compensation(self) -> object | None: ...

    @property
    def raw_arguments(self) -> bool: ...

    @property
    def digest(self) -> str: ...


def check_build_id(build_id: str, where: str = "--build-id") -> str:
    """`build_id` if it is one (1 to 64 letters, digits, `.`, `_`, `-`), else ValueError naming `where`."""
    if not _BUILD_ID.fullmatch(build_id):
        raise ValueError(
            f"{where} must be 1 to 64 letters, digits, '.', '_' or '-' (a release tag or a commit), "
            f"got {build_id!r}"
        )
    return build_id


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()[:DIGEST_HEX]


def tool_digest(definition: VersionedTool) -> str:
    """The digest of `definition`'s specification and behaviour-changing options (stable across runs)."""
    options = definition.options
    return _digest(
        {
            "specification": definition.specification.to_dict(),
            "pool": options.pool,
            "timeout": options.timeout,
            "retries": options.retries,
            "idempotent": options.idempotent,
            "retry_on": sorted(f"{e.__module__}.{e.__qualname__}" for e in options.retry_on),
            "heartbeat_timeout_s": options.heartbeat_timeout_s,
            "requires_approval": options.requires_approval,
            "concurrency": options.concurrency,
            "concurrency_key": options.concurrency_key,
            "rate_limit": options.rate_limit,
            "rate_limit_key": options.rate_limit_key,
            "return_behavior": options.return_behavior.value,
            "search_behavior": options.search_behavior.value,
            "compensable": definition.compensation is not None,
            "raw_arguments": definition.raw_arguments,
        }
    )


def tool_version(definition: VersionedTool, build_id: str | None = None) -> str:
    """The version a worker of build `build_id` advertises for `definition`: its digest, `+<build id>`
    when it has one."""
    digest = definition.digest
    return f"{digest}{BUILD_SEPARATOR}{build_id}" if build_id else digest


def version_digest(version: str) -> str:
    """The digest part of a version."""
    return version.partition(BUILD_SEPARATOR)[0]


def version_build(version: str) -> str | None:
    """The build id a version names, if any."""
    return version.partition(BUILD_SEPARATOR)[2] or None


def version_matches(wanted: str, advertised: str) -> bool:
    """Whether a worker advertising `advertised` may run a call that wants `wanted`: the same digest,
    and the same build when `wanted` names one."""
    if version_build(wanted) is None:
        return version_digest(wanted) == version_digest(advertised)
    return wanted == advertised


def build_queue(pool: str, versions: Iterable[tuple[str, str]]) -> str:
    """The queue of the workers of `pool` that serve exactly `versions` (tool name, version) there:
    workers of one build share it, and a call is published to the one of a build with its version."""
    return f"{pool}{QUEUE_SEPARATOR}{_digest(sorted(versions))}"
