"""Errors of the agent side. `OrchestratorError` is the root; it derives from toolfleet's root."""

from __future__ import annotations

from workers.errors import ToolfleetError

__all__ = [
    "ModelAuthenticationError",
    "ModelConnectionError",
    "ModelError",
    "ModelInvalidRequestError",
    "ModelRateLimitError",
    "ModelResponseError",
    "ModelServerError",
    "ModelTimeoutError",
    "OrchestratorError",
    "UnknownToolError",
    "UnsupportedContentError",
]


class OrchestratorError(ToolfleetError):
    """Root of the errors raised by the orchestrator."""


class UnknownToolError(OrchestratorError):
    """An executor was asked to run a tool it does not know."""


class ModelError(OrchestratorError):
    """A model provider failed; `provider`, `status` and the provider's own message are kept."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class ModelAuthenticationError(ModelError):
    """The provider rejected the credentials (401/403)."""


class ModelRateLimitError(ModelError):
    """The provider is rate-limiting this client (429), after the retries were spent."""


class ModelInvalidRequestError(ModelError):
    """The provider rejected the request as malformed (400/404/422)."""


class ModelServerError(ModelError):
    """The provider failed on its side (5xx), after the retries were spent."""


class ModelTimeoutError(ModelError):
    """The provider did not answer in time, after the retries were spent."""


class ModelConnectionError(ModelError):
    """The provider could not be reached, after the retries were spent."""


class ModelResponseError(ModelError):
    """The provider answered with something this client cannot read."""


class UnsupportedContentError(ModelError):
    """A message holds content the provider cannot carry (for example images in tool results)."""
