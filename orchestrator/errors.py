"""Every error the agent side raises, in one place. `OrchestratorError` is the root; it derives from
toolfleet's root, `workers.ToolfleetError`. Third-party errors are mapped once, where they arise,
with the original kept as `__cause__`.

    ToolfleetError (workers)
    └── OrchestratorError
        ├── UnknownToolError            an executor was asked for a tool it does not know
        ├── ModelError                  a model provider failed (`provider`, `status`)
        │   ├── ModelAuthenticationError, ModelRateLimitError, ModelInvalidRequestError,
        │   ├── ModelServerError, ModelTimeoutError, ModelConnectionError, ModelResponseError
        │   └── UnsupportedContentError
        ├── ScriptExhaustedError        `ScriptedChatModel` ran out of responses
        ├── RoundTripLimitError         the model kept calling tools past the limit
        ├── HallucinatedToolNameError   the model called a tool that does not exist
        ├── RemoteToolError             a tool's exception re-created from a worker's outcome
        │   └── VisibleRemoteToolError  ... one that carries its message for the model
        ├── SystemToolError             a failure the system describes to the model (timeout, lost worker)
        ├── ApprovalError               a decision on a waiting call cannot be taken
        │   └── ApprovalConflictError   ... it contradicts the one taken, or other arguments
        ├── JournalKeyError             the journal's keys are malformed or open no row
        ├── SchemaError                 the database's schema cannot be brought up to date
        ├── ModelSpecError              a `--model` naming no known provider (also a `ValueError`)
        ├── SetupError                  `toolfleet chat` cannot start
        ├── InvocationTakenOverError    a run ended after another process took its invocation over
        ├── UnknownFleetToolError       no live worker serves a tool a `FleetClient` was asked to call
        ├── JsonRpcError                an A2A request `toolfleet serve` refuses (`code`, JSON-RPC's shape)
        ├── NonFiniteNumberError        JSON text holding NaN or an infinity (also a `ValueError`)
        └── ApiError                    a request `toolfleet serve` refuses (`status`, OpenAI's shape)

Errors aimed at the model (`SystemToolError`, `VisibleRemoteToolError`) also derive from
`workers.ToolErrorVisibleToLlm`; the others end an invocation or a command.
"""

from __future__ import annotations

from collections.abc import Mapping

from workers.errors import ToolErrorVisibleToLlm, ToolfleetError

__all__ = [
    "ApiError",
    "ApprovalConflictError",
    "ApprovalError",
    "HallucinatedToolNameError",
    "InvocationTakenOverError",
    "JournalKeyError",
    "JsonRpcError",
    "ModelAuthenticationError",
    "ModelConnectionError",
    "ModelError",
    "ModelInvalidRequestError",
    "ModelRateLimitError",
    "ModelResponseError",
    "ModelServerError",
    "ModelSpecError",
    "ModelTimeoutError",
    "NonFiniteNumberError",
    "OrchestratorError",
    "RemoteToolError",
    "RoundTripLimitError",
    "SchemaError",
    "ScriptExhaustedError",
    "SetupError",
    "SystemToolError",
    "UnknownFleetToolError",
    "UnknownToolError",
    "UnsupportedContentError",
    "VisibleRemoteToolError",
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


class ScriptExhaustedError(OrchestratorError):
    """`ScriptedChatModel` was asked for more responses than its script holds."""


class RoundTripLimitError(OrchestratorError):
    """The model kept calling tools past `max_tool_calling_round_trips`."""


class HallucinatedToolNameError(OrchestratorError):
    """The model called a tool that does not exist, and no strategy says what to answer."""


class RemoteToolError(OrchestratorError):
    """A tool's exception re-created from its outcome, when the call ran on a worker.

    `type_name` is the qualified name of the tool exception's type (`ValueError`,
    `billing.errors.Declined`), `error_type` its bare class name, `message` its message as recorded
    (the type's name when it had none). A `raise ... from cause` on the worker arrives as
    `__cause__`, itself a `RemoteToolError`.
    """

    def __init__(self, message: str, error_type: str | None, type_name: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type or "Exception"
        self.type_name = type_name or self.error_type


class VisibleRemoteToolError(ToolErrorVisibleToLlm, RemoteToolError):
    """A remote `ToolErrorVisibleToLlm`: its message for the model travelled with the outcome."""

    def __init__(
        self, message: str, error_type: str | None, message_for_llm: str, type_name: str | None = None
    ) -> None:
        super().__init__(message, error_type, type_name)
        self._for_llm = message_for_llm

    def message_for_llm(self) -> str:
        return self._for_llm


class SystemToolError(ToolErrorVisibleToLlm, OrchestratorError):
    """A failure the system itself describes to the model: a timeout, a lost worker, no worker."""


class ApprovalError(OrchestratorError):
    """A decision on a waiting call cannot be taken: no such call, or its invocation is not paused."""


class ApprovalConflictError(ApprovalError):
    """A decision contradicts the one already taken for the call, or names arguments it does not have."""


class InvocationTakenOverError(OrchestratorError):
    """The invocation ended here after another process had taken it over (this one was taken for dead
    and its invocation adopted or recovered): its end here is not the invocation's, the other's is."""


class UnknownFleetToolError(OrchestratorError):
    """No live worker (of the client's pools) serves a tool of that name."""


class JsonRpcError(OrchestratorError):
    """An A2A request refused, as JSON-RPC tells it: its `code` and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class JournalKeyError(OrchestratorError):
    """The journal's keys are malformed, or do not open the encrypted parameters of a row."""


class SchemaError(OrchestratorError):
    """The database's schema could not be brought to the revision this toolfleet needs."""


class ModelSpecError(OrchestratorError, ValueError):
    """A `--model` that names no known provider."""


class SetupError(OrchestratorError):
    """`toolfleet chat` cannot start: the message says what to change."""


class ApiError(OrchestratorError):
    """A request the HTTP service refuses: its `status`, and the OpenAI error's `param` and `code`
    (`orchestrator.server.error_shape` picks the error `type` from the status); `headers` go with
    the answer (e.g. `Retry-After`)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


class NonFiniteNumberError(OrchestratorError, ValueError):
    """JSON text holds `NaN`, `Infinity` or `-Infinity`, or a number too large for a float: `location`
    is where (`parameters.limit`; None for the whole text), `written` the number as written."""

    def __init__(self, message: str, *, location: str | None, written: str) -> None:
        super().__init__(message)
        self.location = location
        self.written = written
