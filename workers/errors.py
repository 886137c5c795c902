"""Errors of the tool side. `ToolfleetError` is the root of every error this package raises."""

from __future__ import annotations

import redis.exceptions

__all__ = [
    "RedisUnavailableError",
    "SettingsError",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolErrorVisibleToLlm",
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


class ToolArgumentsError(ToolfleetError):
    """The model's arguments could not be bound to the tool's parameters."""


class ToolResultError(ToolfleetError):
    """A tool returned a value that cannot be turned into a result (not JSON-serializable, too large)."""


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
