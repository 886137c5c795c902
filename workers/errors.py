"""Errors of the tool side. `ToolfleetError` is the root of every error this package raises.

    ToolfleetError
    ├── SettingsError (also ValueError)          a setting out of its range
    ├── RedisUnavailableError (also redis.ConnectionError)   Redis unusable; redis-py's error as cause
    ├── ToolDefinitionError                      a tool declared in a way that cannot work
    │   └── ToolModuleError                      a `--tools` module that cannot be loaded
    ├── ToolArgumentsError                       the model's arguments do not bind
    ├── ToolResultError                          a result that cannot be turned into text
    ├── ArtifactNotFoundError (also LookupError)   an artifact reference naming nothing in the store
    ├── ToolProgressError (also ValueError)      a progress report that cannot travel
    ├── ToolCancelled (a ToolErrorVisibleToLlm)  the call was cancelled (seen at a report or heartbeat)
    ├── MixedPoolError                           a worker joining a pool that serves other tools
    ├── McpConnectionError (also ConnectionError)   an MCP server out of reach; httpx's error as cause
    ├── McpTimeoutError (also TimeoutError)      an MCP request past its timeout
    ├── McpProtocolError                         an MCP protocol error, or a result not accepted
    └── VisibleToolError (a ToolErrorVisibleToLlm)   a ready-made error whose text the model sees

Third-party errors are mapped once, where they are met, with the original kept as `__cause__`.
`ToolErrorVisibleToLlm` is a mixin, not an error: a tool's own exception marked for the model.
"""

from __future__ import annotations

import redis.exceptions

__all__ = [
    "ArtifactNotFoundError",
    "McpConnectionError",
    "McpProtocolError",
    "McpTimeoutError",
    "MixedPoolError",
    "RedisUnavailableError",
    "SettingsError",
    "ToolArgumentsError",
    "ToolCancelled",
    "ToolDefinitionError",
    "ToolErrorVisibleToLlm",
    "ToolModuleError",
    "ToolProgressError",
    "ToolResultError",
    "ToolfleetError",
    "VisibleToolError",
]


class ToolfleetError(Exception):
    """Root of the errors raised by toolfleet."""


class SettingsError(ToolfleetError, ValueError):
    """A setting is malformed or out of its allowed range; the message names the variable and the range."""


class RedisUnavailableError(ToolfleetError, redis.exceptions.ConnectionError):
    """Redis could not be used; `url` (password masked) and `setting` say which, the cause is redis-py's.

    It is also a `redis.ConnectionError`, so code that handles Redis outages handles it unchanged.
    """

    def __init__(self, message: str, *, url: str, setting: str) -> None:
        super().__init__(message)
        self.url = url
        self.setting = setting


class ToolDefinitionError(ToolfleetError):
    """A tool, parameter or compensation is declared in a way that cannot work; raised at registration."""


class ToolModuleError(ToolDefinitionError):
    """A module named in `--tools` cannot be imported, or lacks the attribute named after its colon."""


class MixedPoolError(ToolfleetError):
    """A worker would join a pool whose live workers serve other tools."""


class McpConnectionError(ToolfleetError, ConnectionError):
    """The MCP server could not be reached, or the connection ended while a call was in flight."""


class McpTimeoutError(ToolfleetError, TimeoutError):
    """An MCP request did not complete within its timeout."""


class McpProtocolError(ToolfleetError):
    """The MCP server answered with a protocol error, or with a result the client could not accept."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class ToolArgumentsError(ToolfleetError):
    """The model's arguments could not be bound to the tool's parameters."""


class ToolResultError(ToolfleetError):
    """A tool returned a value that cannot be turned into a result (not JSON-serializable, too large)."""


class ToolProgressError(ToolfleetError, ValueError):
    """A tool reported progress that cannot travel: a fraction outside [0, 1], data that is not JSON."""


class ToolErrorVisibleToLlm:
    """Mixin for exceptions whose `message_for_llm()` is what the model sees when the tool fails.

    The exception's cause never reaches the model. A blank message counts as unmarked.
    """

    def message_for_llm(self) -> str:
        return str(self)

    @staticmethod
    def from_message(text: str, cause: BaseException | None = None) -> VisibleToolError:
        """A ready exception carrying `text` for the model, with `cause` kept for logs only."""
        error = VisibleToolError(text)
        error.__cause__ = cause
        return error


class VisibleToolError(ToolErrorVisibleToLlm, ToolfleetError):
    """The ready-made `ToolErrorVisibleToLlm` built by `ToolErrorVisibleToLlm.from_message`."""


class ToolCancelled(ToolErrorVisibleToLlm, ToolfleetError):
    """The running call was cancelled: raised by its `ToolProgressReporter` at the tool's next
    `progress()` or `heartbeat()` (cooperative cancellation, on a threads pool or in-process). A tool
    that catches it should clean up and let it propagate. Its message reaches the model, as a
    timeout's does: the cancellation is the system's doing, not the tool's."""


class ArtifactNotFoundError(ToolfleetError, LookupError):
    """An artifact reference names nothing in the artifact store: never made, removed, or not
    the caller's to read."""

    @classmethod
    def missing(cls, artifact_id: str) -> ArtifactNotFoundError:
        """The error of an id that names no artifact, in the words every caller gives: the model, a
        client, the run view and the command line (another tenant's reads the same)."""
        return cls(f"artifact {artifact_id} does not exist (or was removed)")
